package relayclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MaxResponseBytes bounds every answer the client reads, so a hostile or
// broken server cannot exhaust its memory. relay's largest answers (an
// outbox page of 100 rows, a key list) are far smaller.
const MaxResponseBytes = 1 << 20

// Defaults of Options.
const (
	DefaultMaxAttempts  = 4
	DefaultMaxRetryWait = 30 * time.Second
	// DefaultRetryWait is the wait before retrying a 503 without a
	// Retry-After relay's contract promises (a proxy's, or a malformed one).
	DefaultRetryWait = time.Second
)

// Options configure a Client. The zero value is usable: no token (only the
// unauthenticated routes answer), http.DefaultClient's transport, the
// default retries.
type Options struct {
	// Token is the bearer token (a JWT) sent on every /v1 request, never on
	// /healthz, /readyz or the key list.
	Token string
	// HTTPClient sends the requests; nil is a zero http.Client. The client
	// uses a copy that follows no redirect; its Transport, Jar and Timeout are
	// kept.
	HTTPClient *http.Client
	// MaxAttempts bounds the attempts of one request answered 503 (or
	// stream-busy), the first included; 0 is DefaultMaxAttempts, 1 never
	// retries.
	MaxAttempts int
	// MaxRetryWait is the longest Retry-After the client waits out; an
	// answer asking for longer is returned at once, its wait in
	// Problem.RetryAfter. 0 is DefaultMaxRetryWait.
	MaxRetryWait time.Duration
}

// Client calls one relay. It is safe for concurrent use.
type Client struct {
	base        string // scheme://host[/path], no trailing slash
	token       string
	hc          *http.Client
	maxAttempts int
	maxWait     time.Duration
	// sleep waits d or until ctx ends; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
	// now is the clock Retry-After dates are read against.
	now func() time.Time
}

// New returns a client of the relay at baseURL, an http or https URL that
// may carry a path prefix (a relay behind a proxy) but no credentials,
// query or fragment.
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		return nil, errors.New("relayclient: the base URL does not parse")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("relayclient: the base URL must be http or https")
	case u.Host == "":
		return nil, errors.New("relayclient: the base URL has no host")
	case u.User != nil:
		// Credentials in a URL end up in logs and errors; the token is the
		// credential.
		return nil, errors.New("relayclient: the base URL must not hold credentials")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, errors.New("relayclient: the base URL must not hold a query or fragment")
	}
	if opts.MaxAttempts < 0 || opts.MaxRetryWait < 0 {
		return nil, errors.New("relayclient: MaxAttempts and MaxRetryWait must not be negative")
	}
	if strings.ContainsAny(opts.Token, "\r\n") {
		return nil, errors.New("relayclient: the token holds a line break")
	}
	hc := http.Client{}
	if opts.HTTPClient != nil {
		hc = *opts.HTTPClient
	}
	// relay never redirects; a redirect is someone else's answer, and
	// following it could carry the token to another host.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &Client{
		base:        strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"),
		token:       opts.Token,
		hc:          &hc,
		maxAttempts: opts.MaxAttempts,
		maxWait:     opts.MaxRetryWait,
		sleep:       sleepCtx,
		now:         time.Now,
	}
	if c.maxAttempts == 0 {
		c.maxAttempts = DefaultMaxAttempts
	}
	if c.maxWait == 0 {
		c.maxWait = DefaultMaxRetryWait
	}
	return c, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call is one request of an operation.
type call struct {
	op     string // names the operation in errors, e.g. "ingest"
	method string
	path   string // escaped, from the root
	query  url.Values
	body   any // JSON-encoded when non-nil
	auth   bool
	retry  bool
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends c, retrying as the package documents, and returns a 2xx answer,
// or the error: a *Problem for any other status.
func (cl *Client) do(ctx context.Context, c call) (*answer, error) {
	var body []byte
	if c.body != nil {
		var err error
		if body, err = json.Marshal(c.body); err != nil {
			return nil, fmt.Errorf("relayclient: %s: encode the request: %w", c.op, err)
		}
	}
	for attempt := 1; ; attempt++ {
		a, err := cl.send(ctx, c, body)
		if err != nil {
			return nil, err
		}
		if a.status >= 200 && a.status < 300 {
			return a, nil
		}
		p := problemOf(a, cl.now())
		if !c.retry || !p.retryable() || attempt >= cl.maxAttempts {
			return nil, p
		}
		wait := p.RetryAfter
		if wait < 0 {
			wait = DefaultRetryWait
		}
		if wait > cl.maxWait {
			return nil, p
		}
		if dl, ok := ctx.Deadline(); ok && cl.now().Add(wait).After(dl) {
			return nil, p // the retry could not be sent in time
		}
		if err := cl.sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("relayclient: %s: %w while waiting to retry: %w", c.op, err, p)
		}
	}
}

// send makes one attempt.
func (cl *Client) send(ctx context.Context, c call, body []byte) (*answer, error) {
	target := cl.base + c.path
	if len(c.query) > 0 {
		target += "?" + c.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("relayclient: %s: %w", c.op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", "relayclient")
	if id := requestID(ctx); id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	if c.auth && cl.token != "" {
		req.Header.Set("Authorization", "Bearer "+cl.token)
	}
	resp, err := cl.hc.Do(req)
	if err != nil {
		// *url.Error names the method and URL, never a header or the body.
		return nil, fmt.Errorf("relayclient: %s: %w", c.op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("relayclient: %s: read the answer: %w", c.op, err)
	}
	if len(data) > MaxResponseBytes {
		return nil, fmt.Errorf("relayclient: %s: the answer (status %d) is larger than %d bytes", c.op, resp.StatusCode, MaxResponseBytes)
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// decode unmarshals a 2xx JSON answer into v. Every answer of relay's is
// an object: a null would decode as the zero value, silently.
func decode(op string, a *answer, v any) error {
	if !bytes.HasPrefix(bytes.TrimSpace(a.body), []byte("{")) {
		return fmt.Errorf("relayclient: %s: the answer (status %d) is not the JSON object relay sends", op, a.status)
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("relayclient: %s: the answer (status %d) is not the JSON relay sends: %w", op, a.status, err)
	}
	return nil
}

// parseRetryAfter reads a Retry-After: seconds or an HTTP date. It is -1
// when absent or malformed; a wait beyond time.Duration's range is the
// longest Duration, which no MaxRetryWait reaches.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			var ne *strconv.NumError
			if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
				return maxDuration
			}
			return -1
		}
		if n > uint64(maxDuration/time.Second) {
			return maxDuration
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return -1
	}
	return max(t.Sub(now), 0)
}

const maxDuration = time.Duration(1<<63 - 1)

type requestIDKey struct{}

// WithRequestID returns ctx carrying id, sent as X-Request-Id on the
// requests made with it, so relay's logs and problems (Problem.RequestID)
// carry the caller's id. relay keeps an id of 1 to 128 of [A-Za-z0-9._-]
// and replaces any other.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	if strings.ContainsAny(id, "\r\n") {
		return ""
	}
	return id
}
