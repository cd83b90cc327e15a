package outbox_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

func (e *env) history() *outbox.Admin {
	return &outbox.Admin{Store: e.St, Clock: e.Clk, Retention: 24 * time.Hour}
}

func streamStates(v []outbox.OutcomeStream) map[string]string {
	out := map[string]string{}
	for _, s := range v {
		out[s.Endpoint] = s.State
	}
	return out
}

func TestAnOutcomesStoryShowsEachEndpointsStateAndAttempts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("expired-only", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindExpired}})
		e.Append(committed("r-1"))
		putAttempt(t, e, "billing", "r-1")
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: t0 + 70, DurationMs: 12, Status: 200})
		e.Clk.Advance(time.Minute)
		e.putEndpoint("later", schema.Endpoint{Enabled: true, CreatedMs: e.NowMs(), UpdatedMs: e.NowMs()})

		v, err := e.history().Outcome(e.Ctx, e.P, "r-1")
		if err != nil {
			t.Fatal(err)
		}
		if v.AcceptedMs != t0 || v.Outcome.ReservationID != "r-1" || v.Outcome.Committed == nil {
			t.Errorf("view %+v", v)
		}
		want := map[string]string{"audit": "pending", "billing": "delivered", "expired-only": "filtered"}
		if got := streamStates(v.Streams); !reflect.DeepEqual(got, want) {
			t.Errorf("states %v, want %v (an endpoint created after is not shown)", got, want)
		}
		for _, s := range v.Streams {
			if s.Endpoint != "billing" {
				continue
			}
			if s.AtMs != t0+70 || s.Attempts.Total != 2 || len(s.Attempts.Last) != 2 {
				t.Fatalf("billing %+v", s)
			}
			first, last := s.Attempts.Last[0], s.Attempts.Last[1]
			if first.Status != 503 || first.ErrorClass != "status" || last.Status != 200 || last.ErrorClass != "" || last.DurationMs != 12 {
				t.Errorf("attempts %+v: the failed one, then the delivering one", s.Attempts.Last)
			}
		}
		if _, err := e.history().Outcome(e.Ctx, e.P, "r-none"); !errors.Is(err, outbox.ErrOutcomeNotFound) {
			t.Errorf("unknown rid: %v", err)
		}
		if _, err := e.history().Outcome(e.Ctx, e.P, "bad/rid"); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("bad rid: %v", err)
		}
	})
}

func TestAResendQueuesADeliveredOutcomeAgainAtItsPlace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"), committed("r-2"))
		ackRetained(t, e, "billing", 2, outbox.Done{AtMs: t0})
		a := e.history()
		if _, err := a.Resend(e.Ctx, e.P, "audit", "r-1"); !errors.Is(err, outbox.ErrStillPending) {
			t.Errorf("resend of a pending outcome: %v", err)
		}
		if _, err := a.Resend(e.Ctx, e.P, "billing", "r-none"); !errors.Is(err, outbox.ErrOutcomeNotFound) {
			t.Errorf("resend of an unknown outcome: %v", err)
		}
		if _, err := a.Resend(e.Ctx, e.P, "nobody", "r-1"); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("resend to an unknown endpoint: %v", err)
		}
		before := countersOf(t, e, "billing")
		got, err := a.Resend(e.Ctx, e.P, "billing", "r-2")
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != 1 || got.DueAtMs != e.NowMs() {
			t.Errorf("resent %+v", got)
		}
		if p := e.pending("billing"); len(p) != 1 || p[0].RID != "r-2" || p[0].Seq != 1 {
			t.Errorf("pending %+v, want r-2 at its own sequence number", p)
		}
		if b, _ := e.backlog("billing"); b.Rows != 1 || b.Bytes != uint64(len(mustRecord(t, committed("r-2")))) {
			t.Errorf("backlog %+v", b)
		}
		if c := countersOf(t, e, "billing"); c.Delivered != before.Delivered-1 {
			t.Errorf("counters %+v after a resend, were %+v", c, before)
		}
		if rows := e.timers(timers.KindOutcomeDelivery, "billing"); len(rows) != 1 || rows[0].DueAtMs != e.NowMs() {
			t.Errorf("delivery timers %+v", rows)
		}
		if _, err := a.Resend(e.Ctx, e.P, "billing", "r-2"); !errors.Is(err, outbox.ErrStillPending) {
			t.Errorf("second resend: %v", err)
		}
		// Delivered again, its state and counts come back.
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: e.NowMs()})
		if c := countersOf(t, e, "billing"); c.Delivered != before.Delivered {
			t.Errorf("counters %+v after delivering it again, were %+v", c, before)
		}
		v, _ := a.Outcome(e.Ctx, e.P, "r-2")
		if got := streamStates(v.Streams)["billing"]; got != "delivered" {
			t.Errorf("state %s", got)
		}
	})
}

func countersOf(t *testing.T, e *env, endpoint string) schema.Counters {
	t.Helper()
	key, _ := schema.CountersKey(endpoint)
	v, found := e.Get(key)
	if !found {
		return schema.Counters{}
	}
	c, err := schema.DecodeCounters(v)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAnErasureRemovesTheOutcomeEverywhereAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"), committed("r-2"))
		putAttempt(t, e, "billing", "r-1")
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: t0})
		putAttempt(t, e, "audit", "r-1")
		got, err := e.history().Erase(e.Ctx, e.P, "r-1")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Dropped, []string{"audit"}) {
			t.Errorf("dropped %v", got.Dropped)
		}
		if _, ok := e.logRow(0); ok {
			t.Error("log row kept")
		}
		for _, ep := range []string{"billing", "audit"} {
			key, _ := schema.AttemptKey(ep, "r-1")
			if _, found := e.Get(key); found {
				t.Errorf("%s attempt row kept", ep)
			}
		}
		if p := e.pending("audit"); len(p) != 1 || p[0].RID != "r-2" {
			t.Errorf("audit pending %+v", p)
		}
		if b, _ := e.backlog("audit"); b.Rows != 1 {
			t.Errorf("audit backlog %+v", b)
		}
		if c := countersOf(t, e, "audit"); c.Dropped != 1 {
			t.Errorf("audit counters %+v", c)
		}
		if _, err := e.history().Outcome(e.Ctx, e.P, "r-1"); !errors.Is(err, outbox.ErrOutcomeNotFound) {
			t.Errorf("erased outcome read: %v", err)
		}
		// The seen row keeps its digest: the rid still answers duplicate.
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Duplicate {
			t.Errorf("after erasure %v", got)
		}
		if _, err := e.history().Erase(e.Ctx, e.P, "r-1"); !errors.Is(err, outbox.ErrOutcomeNotFound) {
			t.Errorf("second erasure: %v", err)
		}
	})
}

func TestOutcomesPageInAcceptanceOrderWithFilters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		for i := range 5 {
			e.Append(committed(ridN(i)), aborted(ridN(i+100)))
			e.Clk.Advance(time.Minute)
		}
		ackRetained(t, e, "billing", 4, outbox.Done{AtMs: e.NowMs()})
		a := e.history()
		all := collect(t, e, a, outbox.OutcomeFilter{}, 3)
		if len(all) != 10 || all[0] != "r-000" || all[1] != "r-100" || all[9] != "r-104" {
			t.Errorf("all %v", all)
		}
		audit := collect(t, e, a, outbox.OutcomeFilter{Endpoint: "audit", State: "pending"}, 100)
		if len(audit) != 5 || audit[0] != "r-100" {
			t.Errorf("pending on audit %v", audit)
		}
		filtered := collect(t, e, a, outbox.OutcomeFilter{Endpoint: "audit", State: "filtered"}, 100)
		if len(filtered) != 5 || filtered[0] != "r-000" {
			t.Errorf("filtered on audit %v", filtered)
		}
		delivered := collect(t, e, a, outbox.OutcomeFilter{Endpoint: "billing", State: "delivered"}, 100)
		if !reflect.DeepEqual(delivered, []string{"r-000", "r-100", "r-001", "r-101"}) {
			t.Errorf("delivered on billing %v", delivered)
		}
		ranged := collect(t, e, a, outbox.OutcomeFilter{SinceMs: t0 + time.Minute.Milliseconds(), UntilMs: t0 + 3*time.Minute.Milliseconds()}, 100)
		if !reflect.DeepEqual(ranged, []string{"r-001", "r-101", "r-002", "r-102"}) {
			t.Errorf("accepted in [1m, 3m) %v", ranged)
		}
		for name, f := range map[string]outbox.OutcomeFilter{
			"state":    {State: "lost"},
			"filtered": {State: "filtered"},
			"reversed": {SinceMs: 2, UntilMs: 1},
			"endpoint": {Endpoint: "Bad"},
		} {
			if _, err := a.Outcomes(e.Ctx, e.P, f, nil, 10); !errors.Is(err, outbox.ErrInvalid) {
				t.Errorf("%s: %v", name, err)
			}
		}
		if _, err := a.Outcomes(e.Ctx, e.P, outbox.OutcomeFilter{}, nil, 101); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("limit 101: %v", err)
		}
		if _, err := a.Outcomes(e.Ctx, e.P, outbox.OutcomeFilter{}, []byte("xyz"), 10); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("bad cursor: %v", err)
		}
		if _, err := a.Outcomes(e.Ctx, e.P, outbox.OutcomeFilter{Endpoint: "nobody"}, nil, 10); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("unknown endpoint: %v", err)
		}
	})
}

func ridN(i int) string {
	return "r-" + string(rune('0'+i/100)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10))
}

// collect pages through every outcome the filter keeps.
func collect(t *testing.T, e *env, a *outbox.Admin, f outbox.OutcomeFilter, limit int) []string {
	t.Helper()
	var out []string
	var next []byte
	for pages := 0; ; pages++ {
		if pages > 50 {
			t.Fatal("paging does not end")
		}
		page, err := a.Outcomes(e.Ctx, e.P, f, next, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Outcomes) > limit {
			t.Fatalf("%d outcomes on a page of %d", len(page.Outcomes), limit)
		}
		for _, o := range page.Outcomes {
			out = append(out, o.RID)
		}
		if page.Next == nil {
			return out
		}
		next = page.Next
	}
}

// runRecovery fires the endpoint's recovery timer until it is done, and
// returns the fires it took.
func runRecovery(t *testing.T, e *env, id string) int {
	t.Helper()
	r := &outbox.RecoveryRunner{Clock: e.Clk}
	for fires := 1; fires < 100; fires++ {
		f, err := r.Fire(e.Ctx, timers.FireContext{Store: e.St, Partition: e.P, NowMs: e.NowMs()}, timers.DueTimer{Kind: timers.KindRecovery, Reference: id})
		if err != nil {
			t.Fatal(err)
		}
		if f.Batch.Ops()+3 > store.MaxBatchOps {
			t.Fatalf("%d operations leave the completion no room", f.Batch.Ops())
		}
		if res := e.Apply(f.Batch); !res.Committed {
			t.Fatalf("recovery batch failed precondition %d", res.Failed)
		}
		if f.Done {
			return fires
		}
	}
	t.Fatal("the recovery does not end")
	return 0
}

func TestARecoveryQueuesTheDeliveredOutcomesOfItsRangeInOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true, MaxInFlight: 1})
		var in []string
		for i := range 60 {
			e.Append(committed(ridN(i)))
			in = append(in, ridN(i))
			e.Clk.Advance(time.Second)
		}
		for range 3 {
			ackRetained(t, e, "billing", 20, outbox.Done{AtMs: e.NowMs()})
		}
		// One left pending: a recovery does not queue it twice.
		if _, err := e.history().Resend(e.Ctx, e.P, "billing", ridN(30)); err != nil {
			t.Fatal(err)
		}
		a := e.history()
		since, until := t0+10_000, t0+50_000
		job, err := a.Recover(e.Ctx, e.P, "billing", since, until)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Recover(e.Ctx, e.P, "billing", since, until); !errors.Is(err, outbox.ErrRecoveryRunning) {
			t.Errorf("a second recovery while one runs: %v", err)
		}
		if fires := runRecovery(t, e, "billing"); fires < 2 {
			t.Errorf("%d fires: a page per fire", fires)
		}
		var got []string
		for _, pk := range e.pending("billing") {
			got = append(got, pk.RID)
		}
		if !reflect.DeepEqual(got, in[10:50]) {
			t.Errorf("pending %v, want %v in acceptance order", got, in[10:50])
		}
		done, err := a.Recovery(e.Ctx, e.P, "billing", job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if done.State != schema.RecoveryDone || done.Queued != 39 || done.FinishedMs == 0 {
			t.Errorf("job %+v, want done with 39 queued", done)
		}
		if b, _ := e.backlog("billing"); b.Rows != 40 {
			t.Errorf("backlog %+v", b)
		}
		if _, err := a.Recovery(e.Ctx, e.P, "billing", "00"); !errors.Is(err, outbox.ErrRecoveryNotFound) {
			t.Errorf("unknown job: %v", err)
		}
	})
}

func TestARecoveryRefusesARangeItCannotServe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Clk.Advance(48 * time.Hour)
		before := len(e.all())
		a := e.history()
		now := e.NowMs()
		for name, r := range map[string][2]int64{
			"reversed":             {now - 10, now - 20},
			"empty":                {now - 10, now - 10},
			"beyond the retention": {now - 25*time.Hour.Milliseconds(), now},
		} {
			if _, err := a.Recover(e.Ctx, e.P, "billing", r[0], r[1]); !errors.Is(err, outbox.ErrInvalid) {
				t.Errorf("%s: %v", name, err)
			}
		}
		if _, err := a.Recover(e.Ctx, e.P, "nobody", now-10, now); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("unknown endpoint: %v", err)
		}
		none := &outbox.Admin{Store: e.St, Clock: clock.NewManual(now)}
		if _, err := none.Recover(e.Ctx, e.P, "billing", now-10, now); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("no retention: %v", err)
		}
		if rows := e.all(); len(rows) != before {
			t.Errorf("refused recoveries wrote rows: %d rows", len(rows))
		}
	})
}

// An unreadable log row's acceptance time is unknown: wherever it lies,
// a time range still starts at its first readable row, neither past the
// readable rows after the unreadable one nor past those before it. Listing
// and recovery alike.
func TestAnUnreadableLogRowHidesNoOutcomeOfARange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		const n = 24
		var rids []string
		for i := range n {
			e.Append(committed(ridN(i)))
			rids = append(rids, ridN(i))
			e.Clk.Advance(time.Minute)
		}
		ackRetained(t, e, "billing", n, outbox.Done{AtMs: e.NowMs()})
		since := t0 + 5*time.Minute.Milliseconds()
		// corrupt makes the log rows at seqs unreadable, and returns what
		// the range should list.
		corrupt := func(seqs ...uint64) []string {
			var b store.Batch
			for _, seq := range seqs {
				b.Put(schema.LogKey(seq), store.Value{0x01, 0xff})
			}
			e.Apply(b)
			var want []string
			for i, rid := range rids[5:] {
				if !slices.Contains(seqs, uint64(5+i)) {
					want = append(want, rid)
				}
			}
			return want
		}
		originals := e.scan(schema.LogRange())
		restore := func() {
			var b store.Batch
			for _, r := range originals {
				b.Put(r.Key, r.Value)
			}
			e.Apply(b)
		}
		a := e.history()
		for _, seqs := range [][]uint64{
			{12}, {11}, {6}, {5}, {4}, {0}, {23}, // one, around the middle steps, the range's start and the ends
			{4, 5, 6}, {9, 10, 11, 12, 13},
			{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, // more than one look past a row reads
		} {
			want := corrupt(seqs...)
			if got := collect(t, e, a, outbox.OutcomeFilter{SinceMs: since}, 100); !reflect.DeepEqual(got, want) {
				t.Errorf("unreadable rows %v: listed %v, want %v", seqs, got, want)
			}
			restore()
		}

		want := corrupt(12)
		if _, err := a.Recover(e.Ctx, e.P, "billing", since, e.NowMs()); err != nil {
			t.Fatal(err)
		}
		runRecovery(t, e, "billing")
		restore() // the stream reads its queue from the log: read it whole
		var got []string
		for _, pk := range e.pending("billing") {
			got = append(got, pk.RID)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("recovered %v, want %v", got, want)
		}
	})
}

// collectPages pages through every outcome the filter keeps, following
// Next, and checks that each page's Prev leads back to the page before it.
func collectPages(t *testing.T, e *env, a *outbox.Admin, f outbox.OutcomeFilter, limit int) [][]string {
	t.Helper()
	var pages [][]string
	var cursor, prevNext []byte
	for n := 0; ; n++ {
		if n > 50 {
			t.Fatal("paging does not end")
		}
		page, err := a.Outcomes(e.Ctx, e.P, f, cursor, limit)
		if err != nil {
			t.Fatal(err)
		}
		var rids []string
		for _, o := range page.Outcomes {
			rids = append(rids, o.RID)
		}
		switch {
		case n == 0 && page.Prev != nil:
			t.Errorf("the first page has a previous one")
		case n > 0:
			back, err := a.Outcomes(e.Ctx, e.P, f, page.Prev, limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range back.Outcomes {
				got = append(got, o.RID)
			}
			if want := pages[n-1]; !reflect.DeepEqual(got, want[max(0, len(want)-len(got)):]) || len(got) == 0 {
				t.Errorf("page %d leads back to %v, after %v", n, got, want)
			}
			if back.Next == nil {
				t.Errorf("page %d's previous page leads nowhere on", n)
			} else if again, err := a.Outcomes(e.Ctx, e.P, f, back.Next, limit); err != nil || len(again.Outcomes) == 0 || again.Outcomes[0].RID != page.Outcomes[0].RID {
				t.Errorf("page %d's previous page leads on to %v (%v)", n, again.Outcomes, err)
			}
		}
		_ = prevNext
		pages = append(pages, rids)
		if page.Next == nil {
			return pages
		}
		cursor = page.Next
	}
}

func flatten(pages [][]string) []string {
	var out []string
	for _, p := range pages {
		out = append(out, p...)
	}
	return out
}

func TestOutcomesNewestFirstPageBothWaysAndFilterByKindAndPrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		for i := range 5 {
			e.Append(committed(ridN(i)), aborted(ridN(i+100)))
			e.Clk.Advance(time.Minute)
		}
		a := e.history()
		oldest := collect(t, e, a, outbox.OutcomeFilter{}, 100)
		newest := flatten(collectPages(t, e, a, outbox.OutcomeFilter{NewestFirst: true}, 3))
		want := slices.Clone(oldest)
		slices.Reverse(want)
		if len(newest) != 10 || !reflect.DeepEqual(newest, want) {
			t.Errorf("newest first %v, oldest first %v", newest, oldest)
		}
		if asc := flatten(collectPages(t, e, a, outbox.OutcomeFilter{}, 4)); !reflect.DeepEqual(asc, oldest) {
			t.Errorf("oldest first, paged both ways: %v", asc)
		}
		kind := flatten(collectPages(t, e, a, outbox.OutcomeFilter{NewestFirst: true, Kind: schema.KindAborted}, 2))
		if !reflect.DeepEqual(kind, []string{"r-104", "r-103", "r-102", "r-101", "r-100"}) {
			t.Errorf("aborted, newest first %v", kind)
		}
		prefix := flatten(collectPages(t, e, a, outbox.OutcomeFilter{NewestFirst: true, RIDPrefix: "r-10"}, 100))
		if !reflect.DeepEqual(prefix, []string{"r-104", "r-103", "r-102", "r-101", "r-100"}) {
			t.Errorf("prefix r-10, newest first %v", prefix)
		}
		t0 := e.NowMs() - 5*time.Minute.Milliseconds()
		ranged := collect(t, e, a, outbox.OutcomeFilter{NewestFirst: true, SinceMs: t0 + time.Minute.Milliseconds(), UntilMs: t0 + 3*time.Minute.Milliseconds()}, 100)
		if !reflect.DeepEqual(ranged, []string{"r-102", "r-002", "r-101", "r-001"}) {
			t.Errorf("accepted in [1m, 3m), newest first %v", ranged)
		}
		for name, f := range map[string]outbox.OutcomeFilter{
			"kind":   {Kind: "lost"},
			"prefix": {RIDPrefix: "r 1"},
		} {
			if _, err := a.Outcomes(e.Ctx, e.P, f, nil, 10); !errors.Is(err, outbox.ErrInvalid) {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
}

// A newest-first page reads a bounded number of log positions: past an
// erased stretch longer than that, a page comes back empty with a cursor
// that goes on to the older rows.
func TestOutcomesNewestFirstReadsABoundedStretchOfTheLog(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("old"))
		var batch []schema.Outcome
		for i := range 250 {
			batch = append(batch, committed(fmt.Sprintf("gone-%03d", i)))
			if len(batch) == 50 {
				e.Append(batch...)
				batch = nil
			}
		}
		e.Append(committed("new"))
		a := e.history()
		for i := range 250 {
			if _, err := a.Erase(e.Ctx, e.P, fmt.Sprintf("gone-%03d", i)); err != nil {
				t.Fatal(err)
			}
		}
		page, err := a.Outcomes(e.Ctx, e.P, outbox.OutcomeFilter{NewestFirst: true}, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Outcomes) != 1 || page.Outcomes[0].RID != "new" || page.Next == nil {
			t.Fatalf("first page %+v", page)
		}
		page, err = a.Outcomes(e.Ctx, e.P, outbox.OutcomeFilter{NewestFirst: true}, page.Next, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Outcomes) != 1 || page.Outcomes[0].RID != "old" || page.Next != nil {
			t.Fatalf("second page %+v", page)
		}
	})
}
