package outbox

import (
	"context"
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// EndpointSpec is an endpoint as an operator registers it.
type EndpointSpec struct {
	URL         string
	Scheme      schema.Scheme
	Kinds       []schema.Kind
	Enabled     bool
	MaxInFlight int
	// Secret, for standard-webhooks only, becomes the current secret; the
	// one it replaces stays valid beside it so receivers can rotate. Empty
	// keeps the current secret, or generates one when there is none.
	Secret schema.Secret
	// RotateKey, for standard-webhooks-v1a only, generates a new key pair
	// to sign first; the current one keeps signing beside it until the next
	// rotation. Without it the current keys are kept, or a pair is
	// generated when there is none. Keys are never given: only relay holds
	// the private half.
	RotateKey bool
	// TimeoutMs and Headers replace the endpoint's own (0 and none: the
	// defaults).
	TimeoutMs int
	Headers   map[string]schema.HeaderValue
	// KeepHeaders names headers of the endpoint as stored whose values are
	// kept, unseen: an operator who edits an endpoint read with its secret
	// headers redacted sends their names, not their values. Each must be
	// a header of the endpoint and not one of Headers.
	KeepHeaders []string
	// RateLimit replaces the endpoint's own; 0 is unlimited.
	RateLimit int
}

// PutResult is what PutEndpoint stored.
type PutResult struct {
	Stream
	Created bool
	// Generated is the secret relay generated for the endpoint, shown once;
	// empty when none was generated.
	Generated schema.Secret
}

// PutEndpoint registers the endpoint id, or replaces its configuration. An
// endpoint enabled by this change has its stream delivered at once: its
// timer is pulled to now with the backoff reset, or created when rows wait
// without one (an endpoint registered disabled gets none from ingest).
func (a *Admin) PutEndpoint(ctx context.Context, p store.Partition, id string, spec EndpointSpec) (PutResult, error) {
	if spec.Secret != "" && !spec.Secret.Valid() {
		return PutResult{}, invalidf("secret must be %q followed by the base64 of %d to %d bytes", schema.SecretPrefix, schema.MinSecretBytes, schema.MaxSecretBytes)
	}
	if err := schema.ValidateNewURL(spec.URL); err != nil {
		return PutResult{}, err
	}
	for range adminRetries {
		s, err := a.readStream(ctx, p, id)
		if err != nil {
			return PutResult{}, err
		}
		res, b, err := a.planPut(s, id, spec)
		if err != nil {
			return PutResult{}, err
		}
		if err := a.roomForNamespace(ctx, s); err != nil {
			return PutResult{}, err
		}
		// Known by the row as this call wrote it: its times, and any
		// secret or key pair it generated.
		key := schema.ClassEndpoint.Key(id)
		ok, err := a.applyOwn(ctx, p, b, func(ctx context.Context) (bool, error) { return a.holds(ctx, p, key, putOf(&b, key)) })
		if err != nil {
			return PutResult{}, err
		}
		if ok {
			return res, nil
		}
	}
	return PutResult{}, fmt.Errorf("%w: %s", ErrContended, p)
}

func (a *Admin) planPut(s *streamRead, id string, spec EndpointSpec) (PutResult, store.Batch, error) {
	var b store.Batch
	nowMs := a.Clock.Now().UnixMilli()
	e := schema.Endpoint{URL: spec.URL, Scheme: spec.Scheme, Kinds: spec.Kinds, Enabled: spec.Enabled, MaxInFlight: spec.MaxInFlight,
		TimeoutMs: spec.TimeoutMs, Headers: spec.Headers, RateLimit: spec.RateLimit}.WithDefaults()
	e.CreatedMs, e.UpdatedMs = nowMs, nowMs
	if !e.Enabled {
		e.DisabledMs = nowMs
	}
	res := PutResult{Created: s.ep == nil}
	var (
		prior *schema.Endpoint
		err   error
	)
	if s.ep != nil {
		prior = &s.ep.ep
		if prior.DisabledReason == ReasonDeleting {
			return res, b, ErrDeleting
		}
		e.CreatedMs, e.CreatedSeq = min(prior.CreatedMs, nowMs), prior.CreatedSeq
		if !e.Enabled && !prior.Enabled {
			// Still disabled: keep why (a 410, say) and since when for
			// the operator.
			e.DisabledReason, e.DisabledMs = prior.DisabledReason, prior.DisabledMs
		}
		if e.Headers, err = keepHeaders(spec, prior.Headers); err != nil {
			return res, b, err
		}
	} else if len(spec.KeepHeaders) > 0 {
		return res, b, invalidf("keep_headers.%s: the endpoint holds no such header", spec.KeepHeaders[0])
	} else if s.endpoints >= a.maxEndpoints() {
		// Only a new endpoint is refused: a namespace over its limit
		// keeps working, and its endpoints can still be changed.
		return res, b, &EndpointLimitError{Max: a.maxEndpoints()}
	}
	if e.Scheme == schema.SchemeStandardWebhooks {
		var current []schema.Secret
		if prior != nil && prior.Scheme == schema.SchemeStandardWebhooks {
			current = prior.Secrets
		}
		switch {
		case spec.Secret == "" && len(current) > 0:
			e.Secrets = current
		case spec.Secret == "":
			gen, err := schema.NewSecret()
			if err != nil {
				return res, b, err
			}
			e.Secrets, res.Generated = []schema.Secret{gen}, gen
		case len(current) > 0 && current[0] == spec.Secret:
			e.Secrets = current
		case len(current) > 0:
			// Rotation: the new secret signs first, the old one still
			// verifies until the next rotation.
			e.Secrets = []schema.Secret{spec.Secret, current[0]}
		default:
			e.Secrets = []schema.Secret{spec.Secret}
		}
	} else if spec.Secret != "" {
		return res, b, invalidf("secret is only for scheme %s", schema.SchemeStandardWebhooks)
	}
	if e.Scheme == schema.SchemeStandardWebhooksV1a {
		if e.SigningKeys, err = planSigningKeys(prior, spec.RotateKey); err != nil {
			return res, b, err
		}
	} else if spec.RotateKey {
		return res, b, invalidf("rotate_key is only for scheme %s", schema.SchemeStandardWebhooksV1a)
	}
	value, err := schema.EncodeEndpoint(&e)
	if err != nil {
		return res, b, err
	}
	key := schema.ClassEndpoint.Key(id)
	if s.ep != nil {
		b.RequireEquals(key, s.ep.raw)
	} else {
		b.RequireAbsent(key)
		// Another id created meanwhile is not guarded by the absent row:
		// the fence makes two creations that each read room for one
		// refuse the later.
		if err := s.fence(&b); err != nil {
			return res, b, err
		}
		if e.CreatedSeq, err = s.fenced(); err != nil {
			return res, b, err
		}
		if value, err = schema.EncodeEndpoint(&e); err != nil {
			return res, b, err
		}
		// The stream's counters start at zero, in this growing batch, so
		// the settling batches that add to them never create the row.
		b.Put(schema.ClassCounters.Key(id), schema.EncodeCounters(schema.Counters{}))
	}
	b.Put(key, value)
	if e.Enabled && (prior == nil || !prior.Enabled) {
		planWake(&b, s, id, nowMs)
		markWake(&b, s, id, s.class())
	} else {
		MarkEndpoint(&b, id, s.class(), ClassOf(value, true), false)
	}
	res.Stream = Stream{ID: id, Endpoint: e, Backlog: s.backlog.backlog, Counters: s.counters}
	return res, b, nil
}

// keepHeaders is the spec's headers with those it keeps taken from stored,
// in a map of its own: the spec's is the caller's. The values read are
// guarded with the endpoint row, so a concurrent edit fails the put.
func keepHeaders(spec EndpointSpec, stored map[string]schema.HeaderValue) (map[string]schema.HeaderValue, error) {
	if len(spec.KeepHeaders) == 0 {
		return spec.Headers, nil
	}
	out := make(map[string]schema.HeaderValue, len(spec.Headers)+len(spec.KeepHeaders))
	for n, v := range spec.Headers {
		out[n] = v
	}
	for _, n := range spec.KeepHeaders {
		v, ok := stored[n]
		switch _, given := spec.Headers[n]; {
		case given:
			return nil, invalidf("keep_headers.%s is also in headers: send its value or keep it, not both", n)
		case !ok:
			return nil, invalidf("keep_headers.%s: the endpoint holds no such header", n)
		}
		out[n] = v
	}
	return out, nil
}

func (a *Admin) maxEndpoints() int {
	if a.MaxEndpoints > 0 {
		return min(a.MaxEndpoints, HardMaxEndpoints)
	}
	return DefaultMaxEndpoints
}

func (a *Admin) maxNamespaces() int {
	if a.MaxNamespaces > 0 {
		return a.MaxNamespaces
	}
	return DefaultMaxNamespaces
}

// roomForNamespace refuses the first endpoint of a namespace, read as
// having none, while the store holds its limit of namespaces. The count is
// read before the creating batch, not guarded by it: it spans every
// bucket, which no one batch reaches. So creations of new namespaces in
// flight at once may each pass the limit, by at most their number. An
// endpoint of a namespace that has one is never refused by it, nor is any
// endpoint on a store that keeps no registry.
func (a *Admin) roomForNamespace(ctx context.Context, s *streamRead) error {
	if s.ep != nil || s.endpoints > 0 {
		return nil
	}
	reg, ok := a.Store.(store.Registry)
	if !ok {
		return nil
	}
	n, err := reg.CountRegistered(ctx)
	if err != nil {
		return fmt.Errorf("count namespaces: %w", err)
	}
	if n >= a.maxNamespaces() {
		return &NamespaceLimitError{Max: a.maxNamespaces()}
	}
	return nil
}

// planWake makes an enabled stream with rows due now, with its backoff
// reset: its idle timer is pulled, or one is created when there is none. A
// leased or corrupt timer is left to its fire and its operator.
func planWake(b *store.Batch, s *streamRead, id string, nowMs int64) {
	switch t := s.timer; {
	case t == nil:
		if s.backlog.backlog.Rows == 0 {
			return
		}
		// Guarded by the backlog: a concurrent ingest may create a timer.
		b.Guard(schema.ClassBacklog.Key(id), s.backlog.raw, s.backlog.found)
		b.Put(timers.Key(nowMs, timers.KindOutcomeDelivery, id), timers.EncodeIdle(nil))
	case t.Lease != nil || t.Err != nil:
		b.RequireEquals(t.Key, t.Raw)
	default:
		st, err := schema.DecodeDeliveryState(t.State)
		if err != nil {
			b.RequireEquals(t.Key, t.Raw)
			return
		}
		st.FailedFires = 0
		state, _ := schema.EncodeDeliveryState(st)
		t.Replace(b, nowMs, state)
	}
}

// Endpoint reads one endpoint and its stream.
func (a *Admin) Endpoint(ctx context.Context, p store.Partition, id string) (Stream, error) {
	s, err := a.readStream(ctx, p, id)
	if err != nil {
		return Stream{}, err
	}
	if s.ep == nil {
		return Stream{}, ErrNotFound
	}
	out := Stream{ID: id, Endpoint: s.ep.ep, Backlog: s.backlog.backlog, Timer: viewTimer(s.timer), Counters: s.counters}
	if out.Backlog.Rows > 0 {
		at, err := oldestAccepted(ctx, a.Store, p, []string{id}, a.Clock.Now().UnixMilli(), a.window())
		if err != nil {
			return Stream{}, err
		}
		out.OldestAcceptedMs = at[0]
	}
	return out, nil
}

// Endpoints reads every endpoint of the namespace and its stream, in id
// order.
func (a *Admin) Endpoints(ctx context.Context, p store.Partition) ([]Stream, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	eps, err := readEndpoints(ctx, a.Store, p)
	if err != nil {
		return nil, err
	}
	// Each stream's backlog, then its counters.
	keys := make([]store.Key, 2*len(eps))
	for i, ep := range eps {
		keys[i], keys[len(eps)+i] = schema.ClassBacklog.Key(ep.id), schema.ClassCounters.Key(ep.id)
	}
	rows, err := getMany(ctx, a.Store, p, keys)
	if err != nil {
		return nil, err
	}
	all, err := timers.All(ctx, a.Store, p)
	if err != nil {
		return nil, err
	}
	out := make([]Stream, len(eps))
	var waiting []string
	var at []int
	for i, ep := range eps {
		bl, err := schema.BacklogOf(rows[i].Value, rows[i].Found)
		if err != nil {
			return nil, fmt.Errorf("backlog of %s/%s: %w", p, ep.id, err)
		}
		c, err := schema.CountersOf(rows[len(eps)+i].Value, rows[len(eps)+i].Found)
		if err != nil {
			return nil, fmt.Errorf("counters of %s/%s: %w", p, ep.id, err)
		}
		out[i] = Stream{ID: ep.id, Endpoint: ep.ep, Backlog: bl, Timer: viewTimer(streamTimer(all, ep.id)), Counters: c}
		if bl.Rows > 0 {
			waiting, at = append(waiting, ep.id), append(at, i)
		}
	}
	oldest, err := oldestAccepted(ctx, a.Store, p, waiting, a.Clock.Now().UnixMilli(), a.window())
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i].OldestAcceptedMs = oldest[j]
	}
	return out, nil
}

// endpointPage is how many endpoint rows readEndpoints scans at once.
const endpointPage = 64

// readEndpoints reads every endpoint of the namespace, in id order, however
// many it holds: one over its limit (left by racing registrations of an
// earlier version, or by a lowered limit) is read like any other.
func readEndpoints(ctx context.Context, st store.NamespaceStore, p store.Partition) ([]endpointRow, error) {
	start, end := schema.EndpointRange()
	var out []endpointRow
	var after *store.Cursor
	for {
		page, err := st.Scan(ctx, p, start, end, after, endpointPage)
		if err != nil {
			return nil, fmt.Errorf("scan endpoints of %s: %w", p, err)
		}
		for _, e := range page.Entries {
			pk, ok := schema.Parse(e.Key)
			if !ok || pk.Class != schema.ClassEndpoint {
				return nil, fmt.Errorf("endpoint row of %s: %w", p, corruptf("bad endpoint key"))
			}
			ep, err := schema.DecodeEndpoint(e.Value)
			if err != nil {
				return nil, fmt.Errorf("endpoint %s of %s: %w", pk.Endpoint, p, err)
			}
			out = append(out, endpointRow{id: pk.Endpoint, key: e.Key, raw: e.Value, ep: ep})
		}
		if page.Next == nil {
			return out, nil
		}
		after = page.Next
	}
}

// PerMinute reads the stream of endpoint id's last MinutesKept minutes up
// to the one holding nowMs, oldest first, one entry a minute (zeros where
// nothing happened), at one instant. It does not look at the endpoint row:
// a stream without one reads as zeros.
func (a *Admin) PerMinute(ctx context.Context, p store.Partition, id string, nowMs int64) ([]schema.Minute, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := schema.ValidateEndpointID(id); err != nil {
		return nil, err
	}
	last, ok := schema.MinuteOf(nowMs)
	if !ok || last < MinutesKept-1 {
		return nil, invalidf("time %d ms has no hour of minutes before it", nowMs)
	}
	first := last - (MinutesKept - 1)
	keys := make([]store.Key, MinutesKept)
	for i := range keys {
		keys[i] = schema.MinuteKeyOf(first+uint32(i), id)
	}
	rows, err := getMany(ctx, a.Store, p, keys)
	if err != nil {
		return nil, err
	}
	out := make([]schema.Minute, MinutesKept)
	for i, r := range rows {
		out[i].StartMs = int64(first+uint32(i)) * schema.MinuteMs
		if !r.Found {
			continue
		}
		m, err := schema.DecodeMinute(r.Value)
		if err != nil {
			return nil, fmt.Errorf("minute %d of %s/%s: %w", first+uint32(i), p, id, err)
		}
		out[i].Delivered, out[i].Failed = m.Delivered, m.Failed
	}
	return out, nil
}
