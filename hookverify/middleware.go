package hookverify

import (
	"bytes"
	"errors"
	"io"
	"net/http"
)

// DefaultMaxBody is the largest body Middleware reads: relay's webhook
// bodies are a few KiB.
const DefaultMaxBody = 1 << 20

// Verifier checks one received request against its body. *MkitVerifier and
// *StandardVerifier are Verifiers.
type Verifier interface {
	VerifyRequest(r *http.Request, body []byte) error
}

// MiddlewareOption configures NewMiddleware and Middleware.
type MiddlewareOption func(*middleware)

// WithMaxBody sets the largest body read (DefaultMaxBody when n ≤ 0); a
// larger one is answered 413 without being verified.
func WithMaxBody(n int64) MiddlewareOption {
	return func(m *middleware) {
		if n > 0 {
			m.max = n
		}
	}
}

// WithErrorHook calls f with every refused request and its reason, for
// logging or metrics. The error's text carries no secret or body.
func WithErrorHook(f func(r *http.Request, err error)) MiddlewareOption {
	return func(m *middleware) { m.onError = f }
}

type middleware struct {
	v       Verifier
	next    http.Handler
	max     int64
	onError func(*http.Request, error)
}

// NewMiddleware returns middleware in the shape routers take (chi's Use,
// for one): each handler it wraps gets the body read (up to the limit), the
// request verified with v and, once verified, the body restored. A request
// that fails is answered 401 with a one-line reason (the sender retries; a
// 401 never acknowledges), 413 when the body is too large, 503 when the
// nonce cache is full and 500 when v is misconfigured; next never sees it.
//
//	r := chi.NewRouter()
//	r.Use(hookverify.NewMiddleware(v))
func NewMiddleware(v Verifier, opts ...MiddlewareOption) func(next http.Handler) http.Handler {
	cfg := middleware{v: v, max: DefaultMaxBody}
	for _, o := range opts {
		o(&cfg)
	}
	return func(next http.Handler) http.Handler {
		m := cfg
		m.next = next
		return &m
	}
}

// Middleware wraps next as NewMiddleware(v, opts...) does.
func Middleware(v Verifier, next http.Handler, opts ...MiddlewareOption) http.Handler {
	return NewMiddleware(v, opts...)(next)
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > m.max {
		m.refuse(w, r, http.StatusRequestEntityTooLarge, ErrBodyTooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.max))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			m.refuse(w, r, http.StatusRequestEntityTooLarge, ErrBodyTooLarge)
			return
		}
		m.refuse(w, r, http.StatusBadRequest, errors.New("hookverify: reading body failed"))
		return
	}
	if err := m.v.VerifyRequest(r, body); err != nil {
		status := http.StatusUnauthorized
		switch {
		case errors.Is(err, ErrNonceCacheFull):
			status = http.StatusServiceUnavailable
		case errors.Is(err, ErrConfig):
			status = http.StatusInternalServerError
		}
		m.refuse(w, r, status, err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	m.next.ServeHTTP(w, r)
}

func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, status int, err error) {
	if m.onError != nil {
		m.onError(r, err)
	}
	reason := err.Error()
	if status == http.StatusInternalServerError {
		reason = "hookverify: receiver misconfigured" // details are for the receiver's log, not the sender
	}
	http.Error(w, reason, status)
}
