package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// MaxBodyBytes caps every request body.
const MaxBodyBytes = 1 << 20

// Appender accepts outcomes into a namespace's outbox: an
// *outbox.Appender, or an *outbox.Coalescer that combines concurrent
// requests into one store batch.
type Appender interface {
	Append(ctx context.Context, p store.Partition, outcomes []schema.Outcome) ([]outbox.Status, error)
}

// Config is what the API is built from.
type Config struct {
	Appender Appender
	Admin    *outbox.Admin
	// Oldest reports the backlog sampler's oldest pending row for GET
	// /v1/fleet; nil where no sampler runs.
	Oldest OldestPending
	Auth   *Auth
	// Wake tells the delivery driver that a namespace has a stream due
	// now: after an accepted ingest, an enable and a replay. Optional.
	Wake func(store.Partition)
	// Ingested tells the delivery driver of an accepted ingest in place of
	// Wake: the namespace, the accepted rows by sequence number and rid,
	// and whether a store batch left a stream due (outbox.Status.Due),
	// which only then needs a scan. Optional.
	Ingested func(p store.Partition, accepted []outbox.StreamRef, due bool)
	// CheckURL applies the SSRF rules that need no DNS to an endpoint URL
	// at registration, for fast feedback; delivery applies them again at
	// dial time. Optional.
	CheckURL func(*url.URL) error
	// Ready reports whether relay can serve; its error text is shown on
	// /readyz, so it must carry no internals.
	Ready func(ctx context.Context) error
	// Keys serves the mkit-hook public key list; MetricsHandler serves
	// /metrics; Metrics counts the API's requests and outcomes. All
	// optional.
	Keys           http.Handler
	MetricsHandler http.Handler
	Metrics        *Metrics
	// Console serves the operator console at /console/; optional.
	Console http.Handler
	// PublicURL is relay's public URL, where the console is: the base of
	// the console links it mints.
	PublicURL string
	Clock     clock.Clock
	Logger    *slog.Logger
	// TracerProvider traces every request (Trace); nil traces none, at no
	// cost to a request.
	TracerProvider trace.TracerProvider
}

type api struct {
	Config
	log *slog.Logger
}

// New builds the API's router.
func New(cfg Config) (http.Handler, error) {
	switch {
	case cfg.Appender == nil || cfg.Admin == nil:
		return nil, errors.New("httpapi: an appender and an admin are required")
	case cfg.Auth == nil:
		return nil, errors.New("httpapi: auth is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	a := &api{Config: cfg, log: cfg.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	r := chi.NewRouter()
	r.Use(noStore, AssignRequestID)
	if cfg.TracerProvider != nil {
		r.Use(Trace(cfg.TracerProvider))
	}
	r.Use(AccessLog(a.log), cfg.Metrics.instrument, checkFraming, Recover(a.log))
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		WriteProblem(w, r, NewProblem(SlugNotFound, "no such route"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// A custom handler loses chi's Allow header; RFC 9110 §15.5.6
		// requires it.
		path := req.URL.RawPath
		if path == "" {
			path = req.URL.Path
		}
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			if r.Match(chi.NewRouteContext(), m, path) {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		WriteProblem(w, req, NewProblem(SlugMethodNotAllowed, ""))
	})

	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	r.Get("/readyz", a.readyz)
	if cfg.Keys != nil {
		r.Method(http.MethodGet, "/.well-known/mkit-hook-keys.json", cfg.Keys)
	}
	if cfg.MetricsHandler != nil {
		r.Method(http.MethodGet, "/metrics", cfg.MetricsHandler)
	}

	if cfg.Console != nil {
		// A browser pointed at relay lands on the console; any other
		// unknown path stays the API's problem+json 404.
		r.Method(http.MethodGet, "/", cfg.Console)
		r.Method(http.MethodHead, "/", cfg.Console)
		r.Method(http.MethodGet, "/console", cfg.Console)
		r.Method(http.MethodGet, "/console/*", cfg.Console)
		r.Method(http.MethodHead, "/console/*", cfg.Console)
	}

	// One router, each route whole: a mounted router per path prefix would
	// route every request again and rebuild its pattern at each level.
	r.Group(func(r chi.Router) {
		r.Use(MaxBody(MaxBodyBytes))
		const ns = "/v1/namespaces/{ns}"
		r.With(cfg.Auth.Require(ScopeOutcomesWrite)).Post(ns+"/outcomes", a.postOutcomes)
		r.With(cfg.Auth.RequireAny(ScopeEndpointsWrite, ScopeOutboxRead)).Get(ns+"/endpoints", a.listEndpoints)
		r.With(cfg.Auth.RequireAny(ScopeEndpointsWrite, ScopeOutboxRead)).Get(ns+"/endpoints/{id}", a.getEndpoint)
		r.With(cfg.Auth.Require(ScopeEndpointsWrite)).Put(ns+"/endpoints/{id}", a.putEndpoint)
		r.With(cfg.Auth.Require(ScopeEndpointsWrite)).Delete(ns+"/endpoints/{id}", a.deleteEndpoint)
		r.With(cfg.Auth.Require(ScopeEndpointsWrite)).Post(ns+"/endpoints/{id}/enable", a.enableEndpoint)
		r.With(cfg.Auth.Require(ScopeEndpointsWrite)).Post(ns+"/endpoints/{id}/disable", a.disableEndpoint)
		r.With(cfg.Auth.Require(ScopeEndpointsWrite)).Post(ns+"/endpoints/{id}/test", a.testEndpoint)
		r.With(cfg.Auth.Require(ScopeAdmin)).Post(ns+"/endpoints/{id}/retry", a.retryStream)
		r.With(cfg.Auth.Require(ScopeOutboxRead)).Get(ns+"/outbox", a.getOutbox)
		r.With(cfg.Auth.Require(ScopeOutboxRead)).Get(ns+"/outcomes", a.listOutcomes)
		r.With(cfg.Auth.Require(ScopeOutboxRead)).Get(ns+"/outcomes/{rid}", a.getOutcome)
		r.With(cfg.Auth.Require(ScopeAdmin)).Delete(ns+"/outcomes/{rid}", a.eraseOutcome)
		r.With(cfg.Auth.Require(ScopeAdmin)).Post(ns+"/endpoints/{id}/outcomes/{rid}/resend", a.resend)
		r.With(cfg.Auth.Require(ScopeAdmin)).Post(ns+"/endpoints/{id}/recover", a.startRecovery)
		r.With(cfg.Auth.Require(ScopeOutboxRead)).Get(ns+"/endpoints/{id}/recover", a.previewRecovery)
		r.With(cfg.Auth.Require(ScopeOutboxRead)).Get(ns+"/endpoints/{id}/recoveries/{job}", a.getRecovery)
		r.With(cfg.Auth.Require(ScopeAdmin)).Post(ns+"/console-links", a.postConsoleLink)
		r.With(cfg.Auth.Require(ScopeAdmin)).Get("/v1/namespaces", a.listNamespaces)
		r.With(cfg.Auth.Require(ScopeAdmin)).Get("/v1/fleet", a.getFleet)
		r.With(cfg.Auth.Require(ScopeAdmin)).
			Post("/v1/admin/namespaces/{ns}/endpoints/{id}/outcomes/{rid}/replay", a.replay)
	})
	return r, nil
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if a.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := a.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", err)
			return
		}
	}
	fmt.Fprintln(w, "ready")
}

func (a *api) wake(p store.Partition) {
	if a.Wake != nil {
		a.Wake(p)
	}
}

// partition is the request's namespace, or the problem of a bad one.
func partition(r *http.Request) (store.Partition, *Problem) {
	p := store.Partition{Namespace: chi.URLParam(r, "ns")}
	if p.Validate() != nil {
		return p, NewProblem(SlugInvalidRequest, "namespace must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit")
	}
	return p, nil
}

// streamParams are the request's namespace and endpoint id, or the problem
// of a bad one.
func streamParams(r *http.Request) (store.Partition, string, *Problem) {
	p, prob := partition(r)
	if prob != nil {
		return p, "", prob
	}
	id := chi.URLParam(r, "id")
	if err := schema.ValidateEndpointID(id); err != nil {
		return p, id, NewProblem(SlugInvalidRequest, err.Error())
	}
	return p, id, nil
}

// streamQuery is streamParams and the request's query.
func streamQuery(r *http.Request) (store.Partition, string, url.Values, *Problem) {
	p, id, prob := streamParams(r)
	if prob != nil {
		return p, id, nil, prob
	}
	q, prob := readQuery(r)
	return p, id, q, prob
}

// streamRowParams is streamParams and the reservation id of one of the
// stream's outcomes, which a client may name (not a synthetic one).
func streamRowParams(r *http.Request) (store.Partition, string, string, *Problem) {
	p, id, prob := streamParams(r)
	if prob != nil {
		return p, id, "", prob
	}
	rid := chi.URLParam(r, "rid")
	if err := outbox.ValidateClientReservationID(rid); err != nil {
		return p, id, rid, NewProblem(SlugInvalidRequest, err.Error())
	}
	return p, id, rid, nil
}

// fail answers err: a known refusal as its problem, anything else as an
// internal error whose cause is logged, never shown.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	var backlog *outbox.BacklogError
	var endpoints *outbox.EndpointLimitError
	var namespaces *outbox.NamespaceLimitError
	var p *Problem
	switch {
	case errors.As(err, &p):
	case errors.As(err, &backlog):
		p = NewProblem(SlugEndpointHasBacklog, fmt.Sprintf("%d outcomes are still pending; delete with ?force=true to drop them", backlog.Rows)).
			With("backlog_rows", backlog.Rows)
	case errors.Is(err, outbox.ErrInvalid):
		p = NewProblem(SlugInvalidRequest, err.Error())
	case errors.Is(err, outbox.ErrNotFound):
		p = NewProblem(SlugNotFound, "no endpoint is registered under this id")
	case errors.Is(err, outbox.ErrOutcomeNotFound):
		p = NewProblem(SlugNotFound, "no outcome is retained under this reservation id")
	case errors.Is(err, outbox.ErrRecoveryNotFound):
		p = NewProblem(SlugNotFound, "no such recovery of this endpoint")
	case errors.Is(err, outbox.ErrStillPending):
		p = NewProblem(SlugStillPending, "the outcome is still pending on this endpoint; replay it to have it tried first, now")
	case errors.Is(err, outbox.ErrNotDelivered):
		p = NewProblem(SlugNotDelivered, "the outcome was never delivered to this endpoint: it was dropped, the endpoint's kinds did not take it, or the endpoint was created after it")
	case errors.Is(err, outbox.ErrRecoveryRunning):
		p = NewProblem(SlugRecoveryRunning, "a recovery of this endpoint is running; wait for it to finish")
	case errors.Is(err, outbox.ErrNotPending):
		p = NewProblem(SlugNotPending, "this outcome is not pending on this endpoint: it was delivered, dropped, or never accepted for it")
	case errors.Is(err, outbox.ErrDeleting):
		p = NewProblem(SlugEndpointDeleting, "the endpoint is being deleted; repeat the delete to finish it")
	case errors.Is(err, outbox.ErrDisabled):
		p = NewProblem(SlugEndpointDisabled, "the endpoint is disabled; enable it to deliver")
	case errors.Is(err, outbox.ErrBusy):
		p = NewProblem(SlugStreamBusy, "the stream is being delivered right now; retry in a second")
	case errors.As(err, &endpoints):
		p = NewProblem(SlugTooManyEndpoints, fmt.Sprintf("a namespace holds at most %d endpoints", endpoints.Max))
	case errors.Is(err, outbox.ErrTooManyEndpoints):
		// A namespace left over its limit by an earlier version: ingest
		// fans out to at most one batch's worth of endpoints.
		p = NewProblem(SlugTooManyEndpoints, fmt.Sprintf("the namespace holds more than %d endpoints, the most an outcome is delivered to; delete some", outbox.MaxIngestEndpoints))
	case errors.As(err, &namespaces):
		p = NewProblem(SlugTooManyNamespaces, fmt.Sprintf("relay holds at most %d namespaces; a new one takes the place of one whose endpoints are all deleted", namespaces.Max))
	case errors.Is(err, outbox.ErrBacklogFull):
		// Practically unreachable (2^53 rows or bytes waiting): deliveries
		// draining the backlog clear it, so the producer retries.
		a.log.ErrorContext(r.Context(), "endpoint backlog at its limit", "request_id", RequestID(r.Context()), "error", err)
		p = NewProblem(SlugUnavailable, "an endpoint's backlog holds the most relay can count; retry once deliveries drain it")
	case errors.Is(err, outbox.ErrContended):
		p = NewProblem(SlugContended, "too many concurrent writes to this namespace; retry")
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
		return
	case errors.Is(err, context.DeadlineExceeded):
		a.log.WarnContext(r.Context(), "request timed out", "request_id", RequestID(r.Context()), "error", err)
		p = NewProblem(SlugUnavailable, "the store did not answer in time")
	case errors.Is(err, store.ErrUnavailable):
		// Redis is restarting, failing over, loading or full: the producer
		// retries. The cause (addresses, Redis's words) is for the log only.
		a.log.WarnContext(r.Context(), "store unavailable", "request_id", RequestID(r.Context()), "error", err)
		p = NewProblem(SlugUnavailable, "the store is unavailable for now; retry")
	default:
		a.log.ErrorContext(r.Context(), "request failed", "request_id", RequestID(r.Context()), "error", err)
		p = NewProblem(SlugInternal, "")
	}
	WriteProblem(w, r, p)
}

// rfc3339 formats a Unix millisecond time for the API.
func rfc3339(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
