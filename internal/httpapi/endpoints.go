package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/timers"
)

// endpointBody is an endpoint as a PUT registers it.
type endpointBody struct {
	URL         string                        `json:"url"`
	Scheme      schema.Scheme                 `json:"scheme"`
	Kinds       []schema.Kind                 `json:"kinds"`
	Enabled     *bool                         `json:"enabled"`
	MaxInFlight *int                          `json:"max_in_flight"`
	Secret      schema.Secret                 `json:"secret"`
	RotateKey   bool                          `json:"rotate_key"`
	TimeoutMs   *int                          `json:"timeout_ms"`
	Headers     map[string]schema.HeaderValue `json:"headers"`
	// KeepHeaders names stored headers kept as they are, for a client
	// that read them redacted.
	KeepHeaders []string `json:"keep_headers"`
	RateLimit   *int     `json:"rate_limit"`
}

type backlogView struct {
	Rows  uint64 `json:"rows"`
	Bytes uint64 `json:"bytes"`
}

// endpointView is an endpoint as the API shows it: never a secret, except
// one relay generated, in the answer to the PUT that generated it.
type endpointView struct {
	ID             string        `json:"id"`
	URL            string        `json:"url"`
	Scheme         schema.Scheme `json:"scheme"`
	Kinds          []schema.Kind `json:"kinds"`
	Enabled        bool          `json:"enabled"`
	MaxInFlight    int           `json:"max_in_flight"`
	DisabledReason string        `json:"disabled_reason,omitempty"`
	CreatedAt      string        `json:"created_at"`
	UpdatedAt      string        `json:"updated_at"`
	Backlog        backlogView   `json:"backlog"`
	NextAttemptAt  *string       `json:"next_attempt_at"`
	Secret         string        `json:"secret,omitempty"`
	// PublicKey is the current v1a key's public half, shown on every
	// answer; the private half never leaves relay.
	PublicKey string `json:"public_key,omitempty"`
	// OldestPendingAt and Counters say what became of the stream's rows.
	OldestPendingAt *string      `json:"oldest_pending_at"`
	Counters        countersView `json:"counters"`
	// TimeoutMs is the endpoint's call timeout, the default when it set none.
	TimeoutMs int `json:"timeout_ms"`
	// Headers shows every header's name, and the value of those that are
	// not secret by name or value (outbox.SecretHeader).
	Headers map[string]string `json:"headers"`
	// RateLimit is the endpoint's calls per second; absent when unlimited.
	RateLimit int `json:"rate_limit,omitempty"`
	// Throttle is the stream's limits lowered after the endpoint refused
	// calls; absent when it runs at the configured ones.
	Throttle *throttleView `json:"throttle,omitempty"`
	// DisabledAt is when the endpoint was disabled, by relay or its
	// operator; absent while enabled, and for one disabled before it was
	// kept.
	DisabledAt string `json:"disabled_at,omitempty"`
	// Failing says since when the endpoint's calls fail and how the last
	// failed; absent while it is healthy.
	Failing *failingView `json:"failing,omitempty"`
}

// failingView is a failing stream's health.
type failingView struct {
	Since      string `json:"since"`
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
}

// throttleView is a throttled stream's effective limits and why.
type throttleView struct {
	MaxInFlight int `json:"max_in_flight"`
	// RateLimit is absent for an endpoint without a rate_limit.
	RateLimit *float64 `json:"rate_limit,omitempty"`
	Reason    string   `json:"reason"`
	Since     string   `json:"since"`
}

// viewThrottle shows a stream's throttle within the endpoint's current
// configuration, which may have changed since the last fire; nil when it
// leaves the stream at the configuration.
func viewThrottle(t *outbox.StreamTimer, e schema.Endpoint) *throttleView {
	if t == nil || t.Throttle == nil {
		return nil
	}
	th := t.Throttle
	v := &throttleView{MaxInFlight: min(max(int(th.MaxInFlight), 1), e.MaxInFlight), Reason: th.Reason, Since: rfc3339(th.SinceMs)}
	rateLowered := false
	if e.RateLimit > 0 && th.RateMilli > 0 {
		r := min(float64(th.RateMilli)/1000, float64(e.RateLimit))
		v.RateLimit = &r
		rateLowered = r < float64(e.RateLimit)
	}
	if v.MaxInFlight >= e.MaxInFlight && !rateLowered {
		return nil
	}
	return v
}

type countersView struct {
	Delivered      uint64 `json:"delivered"`
	FailedAttempts uint64 `json:"failed_attempts"`
	Dropped        uint64 `json:"dropped"`
}

func viewEndpoint(s outbox.Stream) endpointView {
	e := s.Endpoint
	v := endpointView{
		ID: s.ID, URL: e.URL, Scheme: e.Scheme, Kinds: e.Kinds, Enabled: e.Enabled,
		MaxInFlight: e.MaxInFlight, DisabledReason: e.DisabledReason,
		CreatedAt: rfc3339(e.CreatedMs), UpdatedAt: rfc3339(e.UpdatedMs),
		Backlog:       backlogView{Rows: s.Backlog.Rows, Bytes: s.Backlog.Bytes},
		NextAttemptAt: nextAttempt(s.Timer, s.Backlog),
	}
	if v.Kinds == nil {
		v.Kinds = []schema.Kind{}
	}
	if len(e.SigningKeys) > 0 {
		v.PublicKey = e.SigningKeys[0].PublicKey()
	}
	if s.OldestAcceptedMs != 0 {
		at := rfc3339(s.OldestAcceptedMs)
		v.OldestPendingAt = &at
	}
	c := s.Counters
	v.Counters = countersView{Delivered: c.Delivered, FailedAttempts: c.FailedAttempts, Dropped: c.Dropped}
	v.RateLimit = e.RateLimit
	v.Throttle = viewThrottle(s.Timer, e)
	if !e.Enabled && e.DisabledMs > 0 {
		v.DisabledAt = rfc3339(e.DisabledMs)
	}
	if t := s.Timer; t != nil && t.FailingSinceMs > 0 {
		v.Failing = &failingView{Since: rfc3339(t.FailingSinceMs), LastStatus: t.LastStatus, LastError: t.LastError}
	}
	v.TimeoutMs = e.TimeoutMs
	if v.TimeoutMs == 0 {
		v.TimeoutMs = schema.DefaultTimeoutMs
	}
	v.Headers = make(map[string]string, len(e.Headers))
	for name, value := range e.Headers {
		if outbox.SecretHeader(name, value) {
			v.Headers[name] = schema.RedactedHeader
			continue
		}
		v.Headers[name] = string(value)
	}
	return v
}

// nextAttempt is when the stream's timer fires next; nil when it has none,
// is parked, or only waits, idle and not failing, with nothing to deliver:
// a timer kept after its stream ended (timers.Fired.Stay) ends when it
// fires.
func nextAttempt(t *outbox.StreamTimer, backlog schema.Backlog) *string {
	if t == nil || t.DueAtMs == timers.NeverMs {
		return nil
	}
	if backlog.Rows == 0 && !t.Leased && t.FailedFires == 0 && t.FailingSinceMs == 0 {
		return nil
	}
	s := rfc3339(t.DueAtMs)
	return &s
}

func (a *api) putEndpoint(w http.ResponseWriter, r *http.Request) {
	p, id, prob := streamParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	var body endpointBody
	if prob := readJSON(r, &body); prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	spec := outbox.EndpointSpec{URL: body.URL, Scheme: body.Scheme, Kinds: body.Kinds, Enabled: true, Secret: body.Secret, RotateKey: body.RotateKey}
	if body.Enabled != nil {
		spec.Enabled = *body.Enabled
	}
	if body.MaxInFlight != nil {
		if *body.MaxInFlight < schema.MinMaxInFlight || *body.MaxInFlight > schema.MaxMaxInFlight {
			WriteProblem(w, r, NewProblem(SlugInvalidEndpoint, "max_in_flight must be 1 to 16"))
			return
		}
		spec.MaxInFlight = *body.MaxInFlight
	}
	if body.TimeoutMs != nil {
		if *body.TimeoutMs < schema.MinTimeoutMs || *body.TimeoutMs > schema.MaxTimeoutMs {
			WriteProblem(w, r, NewProblem(SlugInvalidEndpoint, fmt.Sprintf("timeout_ms must be %d to %d", schema.MinTimeoutMs, schema.MaxTimeoutMs)))
			return
		}
		spec.TimeoutMs = *body.TimeoutMs
	}
	if body.RateLimit != nil {
		if *body.RateLimit < schema.MinRateLimit || *body.RateLimit > schema.MaxRateLimit {
			WriteProblem(w, r, NewProblem(SlugInvalidEndpoint, fmt.Sprintf("rate_limit must be %d to %d calls per second", schema.MinRateLimit, schema.MaxRateLimit)))
			return
		}
		spec.RateLimit = *body.RateLimit
	}
	spec.Headers, spec.KeepHeaders = body.Headers, body.KeepHeaders
	if err := schema.ValidateNewURL(body.URL); err != nil {
		WriteProblem(w, r, NewProblem(SlugInvalidEndpoint, err.Error()))
		return
	}
	if prob := a.checkURL(body.URL); prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	res, err := a.Admin.PutEndpoint(r.Context(), p, id, spec)
	if err != nil {
		if errors.Is(err, outbox.ErrInvalid) {
			WriteProblem(w, r, NewProblem(SlugInvalidEndpoint, err.Error()))
			return
		}
		a.fail(w, r, err)
		return
	}
	a.audit(r, "endpoint registered", "namespace", p.Namespace, "endpoint", id, "created", res.Created, "enabled", res.Endpoint.Enabled)
	if res.Endpoint.Enabled {
		a.wake(p)
	}
	view := viewEndpoint(res.Stream)
	view.Secret = string(res.Generated)
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	WriteJSON(w, status, view)
}

// checkURL applies the SSRF rules that need no DNS. A URL that does not
// parse is left to the endpoint's own validation.
func (a *api) checkURL(raw string) *Problem {
	u, err := url.Parse(raw)
	if a.CheckURL == nil || raw == "" || err != nil {
		return nil
	}
	if err := a.CheckURL(u); err != nil {
		var he *outbound.Error
		if errors.As(err, &he) && he.Class == outbound.ClassRefused {
			return NewProblem(SlugUnsafeURL, "url: relay may not send to this address (private, loopback, link-local or metadata); an operator can allow it with RELAY_ALLOW_CIDRS")
		}
		return NewProblem(SlugInvalidEndpoint, "url: "+strings.TrimPrefix(err.Error(), "webhook: url: "))
	}
	return nil
}

func (a *api) listEndpoints(w http.ResponseWriter, r *http.Request) {
	p, prob := partition(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	streams, err := a.Admin.Endpoints(r.Context(), p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := struct {
		Endpoints []endpointView `json:"endpoints"`
	}{Endpoints: make([]endpointView, len(streams))}
	for i, s := range streams {
		out.Endpoints[i] = viewEndpoint(s)
	}
	WriteJSON(w, http.StatusOK, out)
}

// queryBool is the query flag name: false when absent, and else exactly the
// contract's boolean, not strconv.ParseBool's 1, t, T, TRUE or True, on
// flags that drop data or enable an endpoint.
func queryBool(q url.Values, name string) (bool, *Problem) {
	if !q.Has(name) {
		return false, nil
	}
	switch q.Get(name) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, NewProblem(SlugInvalidRequest, name+" must be true or false")
}

func (a *api) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	p, id, q, prob := streamQuery(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	force, prob := queryBool(q, "force")
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	dropped, err := a.Admin.DeleteEndpoint(r.Context(), p, id, force)
	if dropped > 0 || err == nil {
		a.audit(r, "endpoint deleted", "namespace", p.Namespace, "endpoint", id, "dropped_rows", dropped, "finished", err == nil)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, struct {
		ID          string `json:"id"`
		DroppedRows uint64 `json:"dropped_rows"`
	}{id, dropped})
}

// audit logs a change an operator made, with who made it.
func (a *api) audit(r *http.Request, msg string, args ...any) {
	subject := ""
	if pr, ok := PrincipalFrom(r.Context()); ok {
		subject = pr.Subject
	}
	args = append(args, "subject", subject, "request_id", RequestID(r.Context()))
	a.log.InfoContext(r.Context(), msg, args...)
}
