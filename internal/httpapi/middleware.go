package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
)

// HeaderRequestID carries the request id, both ways.
const HeaderRequestID = "X-Request-Id"

type ctxKey int

const (
	exchangeKey ctxKey = iota
	principalKey
)

// exchange is what the layers of one request tell each other: its id, and
// who its token named. It goes into the context once, by AssignRequestID,
// as each layer adding a value of its own would copy the request again.
type exchange struct {
	id     string
	access access
	// principal is the one Require admitted; nil before.
	principal *Principal
}

func exchangeFrom(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey).(*exchange)
	return x
}

// noStore marks every answer Cache-Control: no-store, so that no browser
// or proxy keeps one: answers hold endpoints, rows and problems that only
// a token may see, and health that is true only now. A handler whose
// answer may be kept sets its own (the key list, the console's files). It
// goes outermost, so every problem carries it.
func noStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// AssignRequestID gives every request an id: the client's X-Request-Id when
// it is 1..128 of [A-Za-z0-9._-], so callers can correlate, else a random
// one. The id is in the context (RequestID) and the response header. It
// goes outermost, so the access log and every problem carry it.
func AssignRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderRequestID)
		if !saneRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set(HeaderRequestID, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), exchangeKey, &exchange{id: id})))
	})
}

// RequestID is the id AssignRequestID gave the request; empty without it.
func RequestID(ctx context.Context) string {
	if x := exchangeFrom(ctx); x != nil {
		return x.id
	}
	return ""
}

func saneRequestID(id string) bool {
	if len(id) < 1 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24.
	return hex.EncodeToString(b[:])
}

// access is what inner layers tell the access log: the authenticated
// subject, or why authentication failed.
type access struct {
	subject   string
	authError string
}

func accessFrom(ctx context.Context) *access {
	if x := exchangeFrom(ctx); x != nil {
		return &x.access
	}
	return nil
}

// AccessLog logs one line per request: method, path, route pattern, status,
// bytes, duration, request id and the authenticated subject. It never logs
// the query string, headers or bodies, which may carry secrets. What the
// client chose (method, path, and the subject and error of its token) is
// cut to a few hundred bytes, so a line stays a line whatever was sent. Put
// it inside AssignRequestID and outside Recover, so a panic logs as a 500.
func AccessLog(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			x := exchangeFrom(r.Context())
			if x == nil {
				x = &exchange{}
				r = r.WithContext(context.WithValue(r.Context(), exchangeKey, x))
			}
			acc := &x.access
			rec := record(w)
			aborted := true
			defer func() {
				status := rec.status
				if status == 0 && !aborted {
					status = http.StatusOK // net/http's implicit answer
				}
				level := slog.LevelInfo
				if status >= 500 || aborted {
					level = slog.LevelError
				}
				if !log.Enabled(r.Context(), level) {
					return
				}
				attrs := []slog.Attr{
					slog.String("method", clip(r.Method, maxLoggedMethod)),
					slog.String("path", clip(r.URL.Path, maxLoggedPath)),
					slog.String("route", routePattern(r)),
					slog.Int("status", status),
					slog.Int64("bytes", rec.bytes),
					slog.Duration("duration", time.Since(start)),
					slog.String("request_id", RequestID(r.Context())),
				}
				if acc.subject != "" {
					attrs = append(attrs, slog.String("subject", clip(acc.subject, maxLoggedText)))
				}
				if acc.authError != "" {
					attrs = append(attrs, slog.String("auth_error", clip(acc.authError, maxLoggedText)))
				}
				if aborted {
					attrs = append(attrs, slog.Bool("aborted", true))
				}
				log.LogAttrs(r.Context(), level, "http request", attrs...)
			}()
			next.ServeHTTP(rec, r)
			aborted = false
		})
	}
}

// Longest client-chosen strings the access log writes in full. The longest
// path relay routes (a replay) is under 300 bytes.
const (
	maxLoggedMethod = 32
	maxLoggedPath   = 512
	maxLoggedText   = 256
)

// clip cuts s to at most n bytes at a character boundary, and says how long
// it was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}

// routePattern is chi's matched pattern, or net/http's, or empty.
func routePattern(r *http.Request) string {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		if p := rctx.RoutePattern(); p != "" {
			return p
		}
	}
	return r.Pattern
}

// Recover turns a panic into the internal problem. The panic value and
// stack go to the log, never to the client. http.ErrAbortHandler is
// re-panicked: it is net/http's way to abort a response on purpose.
func Recover(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := record(w)
			defer func() {
				v := recover()
				if v == nil {
					return
				}
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.LogAttrs(r.Context(), slog.LevelError, "panic serving request",
					slog.String("request_id", RequestID(r.Context())),
					slog.String("panic", fmt.Sprint(v)),
					slog.String("stack", string(debug.Stack())))
				if rec.status != 0 {
					// Too late for a problem: abort so the client sees a
					// broken response, not a truncated success.
					panic(http.ErrAbortHandler)
				}
				WriteProblem(rec, r, NewProblem(SlugInternal, ""))
			}()
			next.ServeHTTP(rec, r)
		})
	}
}

// MaxBody caps the request body at n bytes: reading past them fails with a
// *http.MaxBytesError (see IsTooLarge), and the handler answers 413. It
// answers nothing itself, so auth still speaks first on a route behind it.
func MaxBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body != nil && r.Body != http.NoBody {
				r.Body = http.MaxBytesReader(w, r.Body, n)
			}
			next.ServeHTTP(w, r)
		})
	}
}

// IsTooLarge reports whether err comes from reading past MaxBody's cap.
func IsTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

// recorder notes the status and size of a response. Unwrap lets
// http.ResponseController reach the connection beneath.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *recorder) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// record is the recorder of w: w itself when an outer layer already
// records it, as every write passes through that one too.
func record(w http.ResponseWriter) *recorder {
	if rec, ok := w.(*recorder); ok {
		return rec
	}
	return &recorder{ResponseWriter: w}
}
