package outbox_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// The ledger test drives one namespace through random steps against a model
// of what each step must do, and after every step checks the model against
// the store and, independently of the model, the ledger and the log's
// invariants.

// ledgerRetention is the retention of the history the steps keep.
const ledgerRetention = time.Hour

// lEntry is the model of one stream's entry in a log row.
type lEntry struct {
	state schema.EntryState
	// inc is the incarnation of the endpoint that the entry is for.
	inc int
	// attempts: the entry flags an attempt row for the log sweep.
	attempts bool
	// atMs is the entry's at ms; resentTag for a resent entry's, a random
	// tag of the Resend.
	atMs int64
}

// resentTag stands for the random tag a resent entry's at ms holds.
const resentTag = -1

// lOutcome is the model of one accepted outcome.
type lOutcome struct {
	rid      string
	seq      uint64
	accepted int64
	bytes    uint64
	// logged: its log row exists (not erased, swept, or deleted by the
	// last stream done with it keeping no history).
	logged  bool
	entries map[string]*lEntry
}

// lStream is the model of one endpoint's stream in its current incarnation.
type lStream struct {
	inc      int
	kinds    []schema.Kind
	deleting bool
	// accepted counts the outcomes ingest gave this incarnation.
	accepted, delivered, dropped, failed uint64
}

func (s *lStream) accepts(k schema.Kind) bool {
	return !s.deleting && (len(s.kinds) == 0 || slices.Contains(s.kinds, k))
}

type ledger struct {
	t        *testing.T
	e        *env
	rng      *rand.Rand
	admin    *outbox.Admin
	ids      []string
	streams  map[string]*lStream
	outcomes []*lOutcome // in sequence order
	byRID    map[string]*lOutcome
	attempts map[[2]string]bool // attempt rows: endpoint, rid
	next     int
	step     int
	// done counts what the steps did, so that a run that exercised
	// nothing cannot pass unnoticed.
	done map[string]int
}

func (l *ledger) fatalf(format string, args ...any) {
	l.t.Helper()
	l.t.Fatalf("step %d: "+format, append([]any{l.step}, args...)...)
}

var ledgerKinds = [][]schema.Kind{nil, {schema.KindCommitted}, {schema.KindAborted}, {schema.KindCommitted, schema.KindAborted}}

func (l *ledger) create(id string, kinds []schema.Kind) {
	l.t.Helper()
	inc := 0
	if s, ok := l.streams[id]; ok {
		inc = s.inc + 1
	}
	l.e.put(id, outbox.EndpointSpec{Enabled: true, Kinds: kinds})
	l.streams[id] = &lStream{inc: inc, kinds: kinds}
}

// pendingOf is the model's pending rows of the stream of id, in sequence
// order.
func (l *ledger) pendingOf(id string) []*lOutcome {
	var out []*lOutcome
	for _, o := range l.outcomes {
		if en, ok := o.entries[id]; ok && o.logged && en.state == schema.EntryPending {
			out = append(out, o)
		}
	}
	return out
}

func (o *lOutcome) pendingElsewhere(id string) bool {
	for ep, en := range o.entries {
		if ep != id && en.state == schema.EntryPending {
			return true
		}
	}
	return false
}

// ingest appends a list of new outcomes in one Append.
func (l *ledger) ingest() {
	var list []schema.Outcome
	for range 1 + l.rng.IntN(5) {
		rid := fmt.Sprintf("r-%d", l.next)
		l.next++
		if l.rng.IntN(2) == 0 {
			list = append(list, committed(rid))
		} else {
			list = append(list, aborted(rid))
		}
	}
	statuses, err := l.e.App.Append(l.e.Ctx, l.e.P, list)
	if err != nil {
		l.fatalf("append: %v", err)
	}
	for i, o := range list {
		var takers []string
		for _, id := range l.ids {
			if l.streams[id].accepts(o.Kind()) {
				takers = append(takers, id)
			}
		}
		want := outbox.Accepted
		if len(takers) == 0 {
			want = outbox.NoEndpoint
		}
		if statuses[i].Code != want {
			l.fatalf("%s (%s) answered %s, want %s", o.ReservationID, o.Kind(), statuses[i].Code, want)
		}
		if want != outbox.Accepted {
			continue
		}
		v, err := l.admin.Outcome(l.e.Ctx, l.e.P, o.ReservationID)
		if err != nil {
			l.fatalf("outcome %s: %v", o.ReservationID, err)
		}
		if v.AcceptedMs != l.e.NowMs() {
			l.fatalf("%s accepted at %d, now is %d", o.ReservationID, v.AcceptedMs, l.e.NowMs())
		}
		m := &lOutcome{rid: o.ReservationID, seq: v.Seq, accepted: v.AcceptedMs, bytes: uint64(len(mustRecord(l.t, o))),
			logged: true, entries: map[string]*lEntry{}}
		if n := len(l.outcomes); n > 0 && l.outcomes[n-1].seq >= m.seq {
			l.fatalf("%s at sequence %d after %d", m.rid, m.seq, l.outcomes[n-1].seq)
		}
		for _, id := range takers {
			m.entries[id] = &lEntry{state: schema.EntryPending, inc: l.streams[id].inc}
			l.streams[id].accepted++
		}
		l.done["accepted"]++
		l.outcomes = append(l.outcomes, m)
		l.byRID[m.rid] = m
	}
}

// ackPrefix acknowledges the first n pending rows of the stream as a
// delivery fire does, keeping their history when retain, and returns their
// rids.
func (l *ledger) ackPrefix(id string, n int, retain bool, done outbox.Done) []string {
	e := l.e
	rids, err := outboxtest.AckPage(e.Ctx, e.St, e.P, id, n, retain, done)
	if err != nil || len(rids) != n {
		l.fatalf("acknowledge %d rows of %s: %v acknowledged, %v", n, id, rids, err)
	}
	return rids
}

func (l *ledger) ack() {
	id := l.ids[l.rng.IntN(len(l.ids))]
	s, pending := l.streams[id], l.pendingOf(id)
	if s.deleting || len(pending) == 0 {
		return
	}
	n := 1 + l.rng.IntN(min(len(pending), outbox.MaxAcksPerBatch))
	retain := l.rng.IntN(2) == 0
	done := outbox.Done{AtMs: l.e.NowMs(), DurationMs: uint32(1 + l.rng.IntN(500)), Status: 200}
	got := l.ackPrefix(id, n, retain, done)
	var want []string
	for _, o := range pending[:n] {
		want = append(want, o.rid)
		en := o.entries[id]
		key := [2]string{id, o.rid}
		en.state, en.atMs, en.attempts = schema.EntryDelivered, done.AtMs, retain && l.attempts[key]
		if !retain {
			delete(l.attempts, key)
			if !o.pendingElsewhere(id) {
				o.logged = false
			}
		}
	}
	s.delivered += uint64(n)
	l.done[fmt.Sprintf("acked retain=%v", retain)] += n
	if !reflect.DeepEqual(got, want) {
		l.fatalf("acknowledged %v on %s, want the prefix %v", got, id, want)
	}
}

// failedAttempt records a failed call of a pending row: its attempt row and
// the fire's note counting it.
func (l *ledger) failedAttempt() {
	id := l.ids[l.rng.IntN(len(l.ids))]
	s, pending := l.streams[id], l.pendingOf(id)
	if s.deleting || len(pending) == 0 {
		return
	}
	o := pending[l.rng.IntN(len(pending))]
	putAttempt(l.t, l.e, id, o.rid)
	l.attempts[[2]string{id, o.rid}] = true
	f := 1 + l.rng.IntN(3)
	note, err := outbox.FailedAttemptsNote(id, f)
	if err != nil {
		l.fatalf("note: %v", err)
	}
	l.e.Apply(store.Batch{Writes: []store.Write{note}})
	s.failed += uint64(f)
}

// anyRID is a random outcome ever accepted, mostly a retained one.
func (l *ledger) anyRID() (*lOutcome, bool) {
	if len(l.outcomes) == 0 {
		return nil, false
	}
	if l.rng.IntN(4) > 0 {
		var logged []*lOutcome
		for _, o := range l.outcomes {
			if o.logged {
				logged = append(logged, o)
			}
		}
		if len(logged) > 0 {
			return logged[l.rng.IntN(len(logged))], true
		}
	}
	return l.outcomes[l.rng.IntN(len(l.outcomes))], true
}

// delivered is the retained outcomes delivered on the current incarnation
// of their streams.
func (l *ledger) delivered() (outcomes []*lOutcome, ids []string) {
	for _, o := range l.outcomes {
		for _, id := range l.ids {
			if en := o.entries[id]; o.logged && en != nil && en.inc == l.streams[id].inc && en.state == schema.EntryDelivered {
				outcomes, ids = append(outcomes, o), append(ids, id)
			}
		}
	}
	return outcomes, ids
}

func (l *ledger) resend() {
	o, ok := l.anyRID()
	if !ok {
		return
	}
	id := l.ids[l.rng.IntN(len(l.ids))]
	// Mostly one that can be resent, else any mix.
	if os, ids := l.delivered(); len(os) > 0 && l.rng.IntN(3) > 0 {
		i := l.rng.IntN(len(os))
		o, id = os[i], ids[i]
	}
	s := l.streams[id]
	en := o.entries[id]
	var want error
	switch {
	case s.deleting:
		want = outbox.ErrDeleting
	case !o.logged:
		want = outbox.ErrOutcomeNotFound
	case en == nil || en.inc != s.inc:
		want = outbox.ErrNotDelivered
	case en.state == schema.EntryPending:
		want = outbox.ErrStillPending
	case en.state != schema.EntryDelivered:
		want = outbox.ErrNotDelivered
	}
	got, err := l.admin.Resend(l.e.Ctx, l.e.P, id, o.rid)
	if !errors.Is(err, want) || (want == nil && err != nil) {
		l.fatalf("resend of %s to %s: %v, want %v", o.rid, id, err, want)
	}
	if want != nil {
		l.done["resend refused"]++
		return
	}
	l.done["resent"]++
	if got.Seq != o.seq {
		l.fatalf("resent %s at %d, want its own sequence number %d", o.rid, got.Seq, o.seq)
	}
	en.state, en.atMs = schema.EntryPending, resentTag
	s.delivered--
}

func (l *ledger) recover() {
	id := l.ids[l.rng.IntN(len(l.ids))]
	s := l.streams[id]
	nowMs := l.e.NowMs()
	retMs := ledgerRetention.Milliseconds()
	since := nowMs - retMs + 1 + l.rng.Int64N(retMs)
	// Mostly a range around delivered outcomes still in the window.
	until := since + 1 + l.rng.Int64N(nowMs-since+1000)
	os, ids := l.delivered()
	for i := len(os) - 1; i >= 0; i-- {
		if os[i].accepted < nowMs-retMs+1 {
			os, ids = os[i+1:], ids[i+1:]
			break
		}
	}
	if len(os) > 0 && l.rng.IntN(3) > 0 {
		i := l.rng.IntN(len(os))
		id, s = ids[i], l.streams[ids[i]]
		since = max(nowMs-retMs+1, os[i].accepted-l.rng.Int64N(20_000))
		until = os[i].accepted + 1 + l.rng.Int64N(20_000)
	}
	job, err := l.admin.Recover(l.e.Ctx, l.e.P, id, since, until)
	if s.deleting {
		if !errors.Is(err, outbox.ErrDeleting) {
			l.fatalf("recovery of deleting %s: %v", id, err)
		}
		return
	}
	if err != nil {
		l.fatalf("recover %s [%d, %d): %v", id, since, until, err)
	}
	runRecovery(l.t, l.e, id)
	var queued uint64
	for _, o := range l.outcomes {
		en := o.entries[id]
		if !o.logged || en == nil || en.inc != s.inc || en.state != schema.EntryDelivered || o.accepted < since || o.accepted >= until {
			continue
		}
		en.state, en.atMs = schema.EntryPending, 0
		queued++
	}
	s.delivered -= queued
	l.done["recovered"] += int(queued)
	// The ledger first: what the job says it queued is its own account.
	l.check()
	r, err := l.admin.Recovery(l.e.Ctx, l.e.P, id, job.ID)
	if err != nil {
		l.fatalf("recovery %s: %v", id, err)
	}
	if r.State != schema.RecoveryDone || r.Queued != queued {
		l.fatalf("recovery of %s [%d, %d): %+v, want done with %d queued", id, since, until, r, queued)
	}
}

func (l *ledger) erase() {
	o, ok := l.anyRID()
	if !ok {
		return
	}
	got, err := l.admin.Erase(l.e.Ctx, l.e.P, o.rid)
	if !o.logged {
		if !errors.Is(err, outbox.ErrOutcomeNotFound) {
			l.fatalf("erasure of gone %s: %v", o.rid, err)
		}
		return
	}
	if err != nil {
		l.fatalf("erase %s: %v", o.rid, err)
	}
	var want []string
	for _, id := range l.ids {
		en := o.entries[id]
		if en == nil {
			continue
		}
		delete(l.attempts, [2]string{id, o.rid})
		if en.state == schema.EntryPending {
			want = append(want, id)
			en.state, en.atMs = schema.EntryDropped, l.e.NowMs()
			l.streams[id].dropped++
		}
	}
	o.logged = false
	l.done["erased"]++
	l.done["erased pending"] += len(want)
	slices.Sort(got.Dropped)
	if !slices.Equal(got.Dropped, want) {
		l.fatalf("erasure of %s dropped %v, want %v", o.rid, got.Dropped, want)
	}
}

// drop is the model of a forced delete dropping the first n pending rows of
// the stream of id, keeping their history when retain.
func (l *ledger) drop(id string, n int, retain bool) {
	for _, o := range l.pendingOf(id)[:n] {
		en := o.entries[id]
		en.state, en.atMs, en.attempts = schema.EntryDropped, l.e.NowMs(), false
		delete(l.attempts, [2]string{id, o.rid})
		if !retain && !o.pendingElsewhere(id) {
			o.logged = false
		}
	}
	l.streams[id].dropped += uint64(n)
	l.done["dropped"] += n
}

// gone is the model of the final batch of a forced delete.
func (l *ledger) gone(id string) {
	for k := range l.attempts {
		if k[0] == id {
			delete(l.attempts, k)
		}
	}
}

// forceDelete deletes an endpoint by force, sometimes cut short after a few
// batches, and re-creates it once it is gone.
func (l *ledger) forceDelete() {
	id := l.ids[l.rng.IntN(len(l.ids))]
	s := l.streams[id]
	retention := time.Duration(0)
	if l.rng.IntN(2) == 0 {
		retention = ledgerRetention
	}
	pending := len(l.pendingOf(id))
	if l.rng.IntN(2) == 0 {
		adm := &outbox.Admin{Store: l.e.St, Clock: l.e.Clk, Retention: retention}
		dropped, err := adm.DeleteEndpoint(l.e.Ctx, l.e.P, id, true)
		if err != nil || dropped != uint64(pending) {
			l.fatalf("forced delete of %s: %d dropped, %v; want %d", id, dropped, err, pending)
		}
		l.drop(id, pending, retention > 0)
		l.gone(id)
		l.create(id, ledgerKinds[l.rng.IntN(len(ledgerKinds))])
		return
	}
	allow := 1 + l.rng.IntN(3)
	adm := &outbox.Admin{Store: &cutStore{NamespaceStore: l.e.St, allow: allow}, Clock: l.e.Clk, Retention: retention}
	dropped, err := adm.DeleteEndpoint(l.e.Ctx, l.e.P, id, true)
	batches := allow
	if !s.deleting && pending > 0 {
		batches-- // the mark
	}
	want := min(pending, outbox.MaxAcksPerBatch*max(batches, 0))
	if dropped != uint64(want) {
		l.fatalf("cut delete of %s (%d batches, %d pending): %d dropped, want %d (%v)", id, allow, pending, dropped, want, err)
	}
	if pending > 0 {
		s.deleting = true
	}
	l.drop(id, want, retention > 0)
	// Every drop page, then the final batch.
	need := (pending + outbox.MaxAcksPerBatch - 1) / outbox.MaxAcksPerBatch
	done := batches > need
	if _, err2 := l.admin.Endpoint(l.e.Ctx, l.e.P, id); errors.Is(err2, outbox.ErrNotFound) != done || (done && err != nil) || (!done && !errors.Is(err, errCut)) {
		l.fatalf("cut delete of %s (%d batches, %d pending): %v, then %v; want it gone %v", id, allow, pending, err, err2, done)
	}
	if done {
		l.done["cut delete finished"]++
		l.gone(id)
		l.create(id, ledgerKinds[l.rng.IntN(len(ledgerKinds))])
	}
}

// sweep advances the clock, past the retention a third of the time, and runs one pass of
// the log sweep to its end.
func (l *ledger) sweep() {
	if l.rng.IntN(3) == 0 {
		l.e.Clk.Advance(ledgerRetention + time.Duration(l.rng.Int64N(int64(ledgerRetention))))
	} else {
		l.e.Clk.Advance(time.Duration(l.rng.Int64N(int64(ledgerRetention))))
	}
	before := map[uint64]schema.LogRow{}
	start, end := schema.LogRange()
	for _, row := range l.e.scan(start, end) {
		pk, _ := schema.Parse(row.Key)
		lr, err := schema.DecodeLog(row.Value)
		if err != nil {
			l.fatalf("log row %d: %v", pk.Seq, err)
		}
		before[pk.Seq] = lr
	}
	s := &outbox.LogSweeper{Retention: ledgerRetention, Rows: 1 + l.rng.IntN(outbox.DefaultLogSweepRows)}
	var state []byte
	for fires := 0; ; fires++ {
		if fires > 1000 {
			l.fatalf("the sweep pass does not end")
		}
		f, ok := fireLogSweep(l.t, l.e, s, state)
		if !ok {
			l.fatalf("sweep batch failed its guards")
		}
		if len(f.State) == 0 {
			break
		}
		state = f.State
	}
	// A swept row never had a pending entry.
	for seq, lr := range before {
		if _, ok := l.e.logRow(seq); ok {
			continue
		}
		for _, en := range lr.Entries {
			if en.State == schema.EntryPending {
				l.fatalf("the sweep deleted log row %d (%s) pending on %s", seq, lr.RID, en.Endpoint)
			}
		}
	}
	nowMs, retMs := l.e.NowMs(), ledgerRetention.Milliseconds()
	for _, o := range l.outcomes {
		if !o.logged || nowMs < o.accepted+retMs {
			continue
		}
		due := true
		for _, en := range o.entries {
			due = due && en.state != schema.EntryPending && nowMs >= en.atMs+retMs
		}
		if !due {
			continue
		}
		o.logged = false
		l.done["swept"]++
		for id, en := range o.entries {
			if en.attempts {
				delete(l.attempts, [2]string{id, o.rid})
			}
		}
	}
}

// check checks the ledger and the log's invariants on the store alone,
// then compares the store with the model.
func (l *ledger) check() {
	l.t.Helper()
	e := l.e
	// Every stream's queue, each row as its pending key; and every
	// pending row of the namespace, which below a stream's head each
	// pending entry must have.
	pendingRows := map[string][]schema.ParsedKey{}
	pendingSet := map[[2]string]uint64{}
	heads := map[string]schema.Head{}
	for _, id := range l.ids {
		heads[id] = outboxtest.Head(l.t, e.St, e.P, id)
		for _, q := range outboxtest.Queue(l.t, e.St, e.P, id) {
			if q.Corrupt {
				l.fatalf("bad queue row %q", q.Key)
			}
			pk := schema.ParsedKey{Class: schema.ClassPending, Endpoint: id, Seq: q.Seq, RID: q.RID}
			pendingRows[id] = append(pendingRows[id], pk)
			pendingSet[[2]string{id, q.RID}] = q.Seq
		}
	}
	rowSet := map[[2]string]uint64{}
	start, end := schema.ClassRange(schema.ClassPending)
	for _, row := range e.scan(start, end) {
		pk, ok := schema.Parse(row.Key)
		if !ok || pk.Class != schema.ClassPending {
			l.fatalf("bad pending row %q", row.Key)
		}
		rowSet[[2]string{pk.Endpoint, pk.RID}] = pk.Seq
	}
	logRows := map[uint64]schema.LogRow{}
	start, end = schema.LogRange()
	for _, row := range e.scan(start, end) {
		pk, _ := schema.Parse(row.Key)
		lr, err := schema.DecodeLog(row.Value)
		if err != nil {
			l.fatalf("log row %d: %v", pk.Seq, err)
		}
		logRows[pk.Seq] = lr
	}

	// The ledger, on the store alone: accepted = delivered + pending +
	// dropped, pending counted both by the backlog and by the rows.
	streams := map[string]outbox.Stream{}
	for _, id := range l.ids {
		st, err := l.admin.Endpoint(e.Ctx, e.P, id)
		if err != nil {
			l.fatalf("endpoint %s: %v", id, err)
		}
		streams[id] = st
		accepted := l.streams[id].accepted
		c, rows := st.Counters, uint64(len(pendingRows[id]))
		if c.Delivered+rows+c.Dropped != accepted || c.Delivered+st.Backlog.Rows+c.Dropped != accepted {
			l.fatalf("%s: %d accepted, %d delivered + %d pending (backlog %d) + %d dropped",
				id, accepted, c.Delivered, rows, st.Backlog.Rows, c.Dropped)
		}
	}

	// The invariants, on the store alone. Every pending row's outcome is in
	// the log, its stream's entry pending.
	for ep, pks := range pendingRows {
		for _, pk := range pks {
			lr, ok := logRows[pk.Seq]
			if !ok || lr.RID != pk.RID {
				l.fatalf("%s/%s pending at %d without its log row", ep, pk.RID, pk.Seq)
			}
			if en, ok := lr.Entry(ep); !ok || en.State != schema.EntryPending {
				l.fatalf("%s/%s pending at %d, its entry %+v", ep, pk.RID, pk.Seq, en)
			}
		}
	}
	// No entry is pending, nor one delivered or dropped still queued, on a
	// stream that disagrees; below a stream's head, each pending entry has
	// its pending row, and no other entry has one.
	for seq, lr := range logRows {
		for _, en := range lr.Entries {
			key := [2]string{en.Endpoint, lr.RID}
			at, queued := pendingSet[key]
			queued = queued && at == seq
			if (en.State == schema.EntryPending) != queued {
				l.fatalf("log row %d (%s): %s entry %v, queued %v", seq, lr.RID, en.Endpoint, en.State, queued)
			}
			at, row := rowSet[key]
			row = row && at == seq
			if h := heads[en.Endpoint]; (!h.Found || seq < h.Seq) && en.State == schema.EntryPending && !row {
				l.fatalf("log row %d (%s): %s entry pending below the head %+v without its pending row", seq, lr.RID, en.Endpoint, h)
			}
			if row && en.State != schema.EntryPending {
				l.fatalf("log row %d (%s): %s entry %v keeps its pending row", seq, lr.RID, en.Endpoint, en.State)
			}
		}
	}

	// The streams as the model has them.
	for _, id := range l.ids {
		s, st := l.streams[id], streams[id]
		if c := st.Counters; c != (schema.Counters{Delivered: s.delivered, FailedAttempts: s.failed, Dropped: s.dropped}) {
			l.fatalf("%s counters %+v, want %d delivered, %d failed, %d dropped", id, c, s.delivered, s.failed, s.dropped)
		}
		var want []schema.ParsedKey
		var bytes uint64
		for _, o := range l.pendingOf(id) {
			want = append(want, schema.ParsedKey{Class: schema.ClassPending, Endpoint: id, RID: o.rid, Seq: o.seq})
			bytes += o.bytes
		}
		if !reflect.DeepEqual(pendingRows[id], want) {
			l.fatalf("%s pending %+v, want %+v", id, pendingRows[id], want)
		}
		if st.Backlog.Bytes != bytes {
			l.fatalf("%s backlog %+v, want %d bytes", id, st.Backlog, bytes)
		}
	}
	for ep := range pendingRows {
		if _, ok := l.streams[ep]; !ok {
			l.fatalf("pending rows of unknown stream %s", ep)
		}
	}

	// The log as the model has it.
	logged := 0
	for _, o := range l.outcomes {
		lr, ok := logRows[o.seq]
		if ok != o.logged {
			l.fatalf("log row %d (%s) present %v, want %v", o.seq, o.rid, ok, o.logged)
		}
		if !ok {
			continue
		}
		logged++
		if lr.RID != o.rid || lr.AcceptedMs != o.accepted || uint64(len(lr.Record)) != o.bytes || len(lr.Entries) != len(o.entries) {
			l.fatalf("log row %d: %s accepted %d, %d bytes, %d entries; want %s, %d, %d, %d",
				o.seq, lr.RID, lr.AcceptedMs, len(lr.Record), len(lr.Entries), o.rid, o.accepted, o.bytes, len(o.entries))
		}
		for _, en := range lr.Entries {
			m := o.entries[en.Endpoint]
			if m == nil || en.State != m.state || (en.AtMs != m.atMs && (m.atMs != resentTag || en.AtMs <= 0)) || (en.State != schema.EntryPending && en.Attempts != m.attempts) {
				l.fatalf("log row %d (%s) entry %+v, want %+v", o.seq, o.rid, en, m)
			}
		}
	}
	if logged != len(logRows) {
		l.fatalf("%d log rows, want %d", len(logRows), logged)
	}

	// The attempt rows as the model has them.
	got := map[[2]string]bool{}
	start, end = schema.ClassRange(schema.ClassAttempt)
	for _, row := range e.scan(start, end) {
		pk, ok := schema.Parse(row.Key)
		if !ok || pk.Class != schema.ClassAttempt {
			l.fatalf("bad attempt row %q", row.Key)
		}
		got[[2]string{pk.Endpoint, pk.RID}] = true
	}
	if len(got) != len(l.attempts) {
		l.fatalf("attempt rows %v, want %v", got, l.attempts)
	}
	for k := range l.attempts {
		if !got[k] {
			l.fatalf("attempt rows %v, want %v", got, l.attempts)
		}
	}
}

func runLedger(t *testing.T, e *env, seed uint64, steps int) {
	l := &ledger{
		t: t, e: e, rng: rand.New(rand.NewPCG(seed, 0)),
		admin:    &outbox.Admin{Store: e.St, Clock: e.Clk, Retention: ledgerRetention},
		ids:      []string{"aborts", "all", "commits"},
		streams:  map[string]*lStream{},
		byRID:    map[string]*lOutcome{},
		attempts: map[[2]string]bool{},
		done:     map[string]int{},
	}
	l.create("all", nil)
	l.create("commits", []schema.Kind{schema.KindCommitted})
	l.create("aborts", []schema.Kind{schema.KindAborted})
	for l.step = range steps {
		// Every step is at a later millisecond: an endpoint created again
		// is younger than every outcome of its earlier self.
		e.Clk.Advance(time.Duration(1+l.rng.IntN(5000)) * time.Millisecond)
		switch op := l.rng.IntN(16); {
		case op < 4:
			l.ingest()
		case op < 8:
			l.ack()
		case op < 9:
			l.failedAttempt()
		case op < 11:
			l.resend()
		case op < 12:
			l.recover()
		case op < 13:
			l.erase()
		case op < 14:
			l.forceDelete()
		default:
			l.sweep()
		}
		l.check()
	}
	t.Logf("did %v", l.done)
}

// The ledger of every stream holds at every step of a random mix of ingest,
// acknowledgements keeping their history or not, failed attempts, resends,
// recoveries, erasures, forced deletes (cut short or not) with the endpoint
// created again, and log sweeps: each outcome ingest gave a stream is
// delivered, pending or dropped, and the log agrees with the pending rows.
// The seed is printed.
func TestTheLedgerHoldsThroughEveryChangeToTheOutbox(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		seed := rand.Uint64()
		t.Logf("seed %d", seed)
		runLedger(t, e, seed, 300)
	})
}

// An endpoint deleted and created again within the millisecond its outcome
// was accepted in must not be given that outcome again: it was the earlier
// endpoint's, delivered there, and the new stream never accepted it, so a
// resend or a recovery of it would count one pending outcome that the new
// stream's ledger never accepted.
func TestAnEndpointCreatedAgainInTheSameMillisecondIsNotResentItsPredecessorsOutcome(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		a := e.history()
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.Append(committed("r-1"), committed("r-2"))
		ackRetained(t, e, "billing", 2, outbox.Done{AtMs: e.NowMs()})
		if _, err := a.DeleteEndpoint(e.Ctx, e.P, "billing", true); err != nil {
			t.Fatal(err)
		}
		// The clock has not moved: the new endpoint is created in the
		// millisecond r-1 was accepted in.
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		if _, err := a.Resend(e.Ctx, e.P, "billing", "r-1"); !errors.Is(err, outbox.ErrNotDelivered) {
			t.Errorf("resend of the earlier endpoint's outcome: %v, want ErrNotDelivered", err)
		}
		job, err := a.Recover(e.Ctx, e.P, "billing", e.NowMs(), e.NowMs()+1)
		if err != nil {
			t.Fatal(err)
		}
		runRecovery(t, e, "billing")
		if r, err := a.Recovery(e.Ctx, e.P, "billing", job.ID); err != nil || r.Queued != 0 {
			t.Errorf("recovery %+v %v queued the earlier endpoint's outcomes, want none", r, err)
		}
		s, err := a.Endpoint(e.Ctx, e.P, "billing")
		if err != nil {
			t.Fatal(err)
		}
		// The new stream accepted nothing.
		if c, n := s.Counters, len(e.pending("billing")); c.Delivered+uint64(n)+c.Dropped != 0 || s.Backlog.Rows != 0 {
			t.Errorf("0 accepted, %d delivered + %d pending (backlog %d) + %d dropped", c.Delivered, n, s.Backlog.Rows, c.Dropped)
		}
	})
}
