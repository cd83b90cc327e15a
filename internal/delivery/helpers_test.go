package delivery

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

const (
	t0 = outboxtest.T0
	ep = "ep"
)

var (
	committed = outboxtest.Committed
	aborted   = outboxtest.Aborted
)

// env is one namespace with one endpoint, on a real store, with a manual
// clock.
type env struct{ *outboxtest.Env }

// eachBackend runs f on a fresh env of every configured backend.
func eachBackend(t *testing.T, f func(t *testing.T, e *env)) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) { f(t, setup(t, b.New(t))) })
}

func setup(t *testing.T, st store.NamespaceStore) *env {
	e := &env{outboxtest.NewEnv(t, st)}
	e.putEndpoint(schema.Endpoint{Enabled: true})
	return e
}

func (e *env) putEndpoint(cfg schema.Endpoint) {
	e.T.Helper()
	outboxtest.PutEndpoint(e.T, e.St, e.P, ep, cfg)
}

func (e *env) endpoint() schema.Endpoint {
	e.T.Helper()
	key, _ := schema.EndpointKey(ep)
	v, found := e.Get(key)
	if !found {
		e.T.Fatal("no endpoint row")
	}
	cfg, err := schema.DecodeEndpoint(v)
	if err != nil {
		e.T.Fatal(err)
	}
	return cfg
}

// seed accepts committed outcomes under the rids, in one request, so their
// sequence follows the order given.
func (e *env) seed(rids ...string) {
	e.T.Helper()
	var os []schema.Outcome
	for _, rid := range rids {
		os = append(os, committed(rid))
	}
	e.append(os...)
}

// append accepts the outcomes, failing the test unless each is accepted.
func (e *env) append(os ...schema.Outcome) {
	e.T.Helper()
	for i, st := range e.Append(os...) {
		if st.Code != outbox.Accepted {
			e.T.Fatalf("append %s: %s %s", os[i].ReservationID, st.Code, st.Detail)
		}
	}
}

func (e *env) put(key store.Key, v store.Value) {
	e.T.Helper()
	var b store.Batch
	b.Put(key, v)
	e.Apply(b)
}

func (e *env) backlogRow() (store.Value, bool) {
	key, _ := schema.BacklogKey(ep)
	return e.Get(key)
}

func (e *env) backlogRows() uint64 {
	e.T.Helper()
	v, found := e.backlogRow()
	if !found {
		return 0
	}
	b, err := schema.DecodeBacklog(v)
	if err != nil {
		e.T.Fatal(err)
	}
	return b.Rows
}

func (e *env) pending() []string {
	e.T.Helper()
	return e.pendingOf(ep)
}

// pendingOf is the reservation ids in the queue of the stream of id.
func (e *env) pendingOf(id string) []string {
	e.T.Helper()
	var rids []string
	for _, q := range outboxtest.Queue(e.T, e.St, e.P, id) {
		rids = append(rids, q.RID)
	}
	return rids
}

// record is the outcome the stream holds pending under rid, as its log row;
// found is false when the stream holds none.
func (e *env) record(rid string) (store.Value, bool) {
	e.T.Helper()
	key, ok := e.logKey(rid)
	if !ok {
		return nil, false
	}
	return e.Get(key)
}

// logKey is the key of the log row of the stream's pending row rid.
func (e *env) logKey(rid string) (store.Key, bool) {
	e.T.Helper()
	for _, q := range outboxtest.Queue(e.T, e.St, e.P, ep) {
		if q.RID == rid {
			return schema.LogKey(q.Seq), true
		}
	}
	return "", false
}

// lastAttempt is a row's newest recorded attempt, with the count of all.
type lastAttempt struct {
	schema.Attempt
	Count uint32
}

func (e *env) attempt(rid string) (lastAttempt, bool) {
	e.T.Helper()
	h, found := e.attempts(rid)
	a, ok := h.Latest()
	if !found || !ok {
		return lastAttempt{}, false
	}
	return lastAttempt{Attempt: a, Count: h.Total}, true
}

// attempts is the row's attempt row, false when it has none.
func (e *env) attempts(rid string) (schema.Attempts, bool) {
	e.T.Helper()
	key, _ := schema.AttemptKey(ep, rid)
	v, found := e.Get(key)
	if !found {
		return schema.Attempts{}, false
	}
	h, err := schema.DecodeAttempts(v)
	if err != nil {
		e.T.Fatal(err)
	}
	return h, true
}

// timer is the stream's delivery timer; ok is false when it has none.
func (e *env) timer() (row timers.Row, ok bool) {
	e.T.Helper()
	rows, err := timers.All(e.Ctx, e.St, e.P)
	if err != nil {
		e.T.Fatal(err)
	}
	var found []timers.Row
	for _, r := range rows {
		if r.Kind == timers.KindOutcomeDelivery && r.Reference == ep {
			found = append(found, r)
		}
	}
	if len(found) > 1 {
		e.T.Fatalf("%d delivery timers", len(found))
	}
	if len(found) == 0 {
		return timers.Row{}, false
	}
	return found[0], true
}

func (e *env) timerDue() int64 {
	e.T.Helper()
	r, ok := e.timer()
	if !ok {
		e.T.Fatal("no delivery timer")
	}
	return r.DueAtMs
}

func (e *env) state() schema.DeliveryState {
	e.T.Helper()
	r, ok := e.timer()
	if !ok {
		e.T.Fatal("no delivery timer")
	}
	s, err := schema.DecodeDeliveryState(r.State)
	if err != nil {
		e.T.Fatal(err)
	}
	return s
}

// fire runs the partition's due timers once, as a driver would, with h.
func (e *env) fire(h *Handler) timers.Report {
	e.T.Helper()
	reg, err := timers.NewHandlers(h)
	if err != nil {
		e.T.Fatal(err)
	}
	rep, err := timers.NewRunner(timers.RunnerConfig{Store: e.St, Handlers: reg, Clock: e.Clk}).RunDue(e.Ctx, e.P, e.NowMs())
	if err != nil {
		e.T.Fatalf("run due: %v", err)
	}
	return rep
}

// fireAtDue moves the clock to the stream's timer and fires it.
func (e *env) fireAtDue(h *Handler) timers.Report {
	e.T.Helper()
	e.Clk.Set(max(e.timerDue(), e.NowMs()))
	return e.fire(h)
}

// planned fires h on the stream's timer directly, without a claim, and
// returns the timer row and what the fire planned.
func (e *env) planned(h *Handler) (timers.Row, timers.Fired) {
	e.T.Helper()
	r, ok := e.timer()
	if !ok {
		e.T.Fatal("no delivery timer")
	}
	fired, err := h.Fire(e.Ctx, timers.FireContext{Store: e.St, Partition: e.P, NowMs: e.NowMs()},
		timers.DueTimer{DueAtMs: r.DueAtMs, Kind: r.Kind, Reference: r.Reference, State: r.State})
	if err != nil {
		e.T.Fatalf("fire: %v", err)
	}
	return r, fired
}

// capture records what it is asked to deliver and fails when told to.
type capture struct {
	mu   sync.Mutex
	seen []Parcel
	fail error
}

func (c *capture) Deliver(_ context.Context, o Parcel) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, o)
	return c.fail
}

func (c *capture) rids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, o := range c.seen {
		out = append(out, o.Outcome.ReservationID)
	}
	return out
}

func (c *capture) count(rid string) int {
	rids := c.rids()
	return len(slices.DeleteFunc(rids, func(r string) bool { return r != rid }))
}

func hasEquals(b store.Batch, key store.Key, v store.Value) bool {
	return slices.ContainsFunc(b.Preconditions, func(p store.Precondition) bool {
		return p.Kind == store.Equals && p.Key == key && string(p.Value) == string(v)
	})
}
