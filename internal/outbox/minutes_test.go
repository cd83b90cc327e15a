package outbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

const minute = int64(60_000)

func (e *env) perMinute(endpoint string) []schema.Minute {
	e.T.Helper()
	m, err := e.admin().PerMinute(e.Ctx, e.P, endpoint, e.NowMs())
	if err != nil {
		e.T.Fatalf("per minute of %s: %v", endpoint, err)
	}
	if len(m) != outbox.MinutesKept {
		e.T.Fatalf("%d minutes, want %d", len(m), outbox.MinutesKept)
	}
	return m
}

// counted is the minutes of ms that count anything, by start.
func counted(ms []schema.Minute) map[int64]schema.Minute {
	out := map[int64]schema.Minute{}
	for _, m := range ms {
		if m.Delivered+m.Failed > 0 {
			out[m.StartMs] = m
		}
	}
	return out
}

// planAcksAt is planAcks with every row delivered at atMs.
func planAcksAt(t *testing.T, e *env, endpoint string, n int, atMs int64) store.Batch {
	t.Helper()
	acks := freshAcks(t, e, endpoint)
	for _, pk := range e.pending(endpoint)[:n] {
		rec, _ := e.record(endpoint, pk.RID)
		if err := acks.Add(pk.RID, pk.Seq, rec, outbox.Done{AtMs: atMs}); err != nil {
			t.Fatal(err)
		}
	}
	var b store.Batch
	acks.Plan(&b)
	return b
}

// withNotes joins notes to b as the timers runner does: an Add to a row b
// already adds to joins that Add.
func withNotes(b store.Batch, notes []store.Write) store.Batch {
	for _, n := range notes {
		joined := false
		for i, w := range b.Writes {
			if n.Kind == store.Add && w.Kind == store.Add && w.Key == n.Key {
				for k := range w.Deltas {
					b.Writes[i].Deltas[k] += n.Deltas[k]
				}
				joined = true
			}
		}
		if !joined {
			b.Writes = append(b.Writes, n)
		}
	}
	return b
}

func minuteStart(ms int64) int64 { return ms / minute * minute }

// An acknowledgement and a fire's note of failed calls count in their
// minutes, with the lifetime counters, once however often the batch is
// sent; a completion whose lease guard fails counts nothing.
func TestMinutesCountAnAcknowledgementOnceAndAFailedCompletionNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.put("audit", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 4)
		at := e.NowMs() + 20_000
		notes, err := outbox.FailedAttemptsNotes("billing", 3, at+minute)
		if err != nil {
			t.Fatal(err)
		}
		// A completion of a fire that lost its lease: the timer row it
		// guards is another's now.
		lost := withNotes(planAcksAt(t, e, "billing", 2, at), notes)
		lost.RequireEquals(e.putTimer(e.NowMs(), timers.KindOutcomeDelivery, "billing", leasedValue(e.NowMs(), nil)), store.Value("another lease"))
		if err := lost.Validate(); err != nil {
			t.Fatal(err)
		}
		if res := e.Apply(lost); res.Committed {
			t.Fatal("a completion whose lease guard fails committed")
		}
		e.Clk.Advance(2 * time.Minute)
		if got := counted(e.perMinute("billing")); len(got) != 0 {
			t.Fatalf("a failed completion counted %+v", got)
		}

		b := withNotes(planAcksAt(t, e, "billing", 2, at), notes)
		for range 2 {
			// The second run is a resend after a lost reply: its pending
			// guards fail.
			e.Apply(b)
		}
		want := map[int64]schema.Minute{
			minuteStart(at):          {StartMs: minuteStart(at), Delivered: 2},
			minuteStart(at + minute): {StartMs: minuteStart(at + minute), Failed: 3},
		}
		if got := counted(e.perMinute("billing")); !equalMinutes(got, want) {
			t.Fatalf("minutes %+v, want %+v", got, want)
		}
		if c := e.counters("billing"); c != (schema.Counters{Delivered: 2, FailedAttempts: 3}) {
			t.Fatalf("counters %+v", c)
		}
		// The same minute: the plan and the note are one Add to its row.
		notes, _ = outbox.FailedAttemptsNotes("billing", 1, at+minute)
		if res := e.Apply(withNotes(planAcksAt(t, e, "billing", 2, at+minute), notes)); !res.Committed {
			t.Fatalf("same minute: %+v", res)
		}
		want[minuteStart(at+minute)] = schema.Minute{StartMs: minuteStart(at + minute), Delivered: 2, Failed: 4}
		if got := counted(e.perMinute("billing")); !equalMinutes(got, want) {
			t.Fatalf("minutes %+v, want %+v", got, want)
		}
		if got := counted(e.perMinute("audit")); len(got) != 0 {
			t.Fatalf("audit counted %+v", got)
		}
	})
}

func equalMinutes(a, b map[int64]schema.Minute) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A batch that counts in a minute deletes the stream's minute an hour
// back, so an active stream keeps an hour of rows; the read shows the hour
// up to now, oldest first.
func TestAMinuteAnHourOldGoesWithTheNextCount(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.put("audit", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 3)
		first := e.NowMs()
		e.Apply(planAcksAt(t, e, "billing", 1, first))
		note, _ := outbox.FailedAttemptsNotes("audit", 1, first)
		e.Apply(store.Batch{Writes: note})
		old, _ := schema.MinuteKey("billing", first)
		if _, found := e.Get(old); !found {
			t.Fatal("no minute row")
		}
		e.Clk.Set(first + 59*minute)
		ms := e.perMinute("billing")
		if ms[0].StartMs != minuteStart(first) || ms[0].Delivered != 1 || ms[59].StartMs != minuteStart(first)+59*minute {
			t.Fatalf("the hour reads %+v … %+v", ms[0], ms[59])
		}
		e.Clk.Set(first + 60*minute)
		e.Apply(planAcksAt(t, e, "billing", 1, e.NowMs()))
		if _, found := e.Get(old); found {
			t.Fatal("the minute an hour back is left")
		}
		if got := counted(e.perMinute("billing")); len(got) != 1 || got[minuteStart(e.NowMs())].Delivered != 1 {
			t.Fatalf("minutes %+v", got)
		}
		// Another stream's minute is its own.
		if k, _ := schema.MinuteKey("audit", first); !e.has(k) {
			t.Fatal("billing's count deleted audit's minute")
		}
	})
}

func (e *env) has(k store.Key) bool {
	_, found := e.Get(k)
	return found
}

// The log sweep's last page of a pass takes the minute rows more than an
// hour old of every stream, and leaves the hour.
func TestTheLogSweepTakesMinutesOlderThanAnHour(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		var keys []store.Key
		for i, id := range []string{"billing", "audit", "ledger"} {
			at := e.NowMs() + int64(i)*minute
			note, _ := outbox.FailedAttemptsNotes(id, 1, at)
			e.Apply(store.Batch{Writes: note})
			k, _ := schema.MinuteKey(id, at)
			keys = append(keys, k)
		}
		// ledger's minute is the oldest of the hour at now.
		e.Clk.Set(e.NowMs() + 61*minute)
		s := &outbox.LogSweeper{}
		f, ok := fireLogSweep(t, e, s, nil)
		if !ok || len(f.State) != 0 {
			t.Fatalf("sweep: %v %+v", ok, f)
		}
		for i, k := range keys {
			if want := i == 2; e.has(k) != want {
				t.Errorf("minute row %d kept %v, want %v", i, e.has(k), want)
			}
		}
		if got := counted(e.perMinute("ledger")); len(got) != 1 {
			t.Fatalf("ledger's hour %+v", got)
		}
	})
}

// The endpoint delete takes the stream's minute rows, so an endpoint created
// again under its id starts at zero; another stream's stay.
func TestTheEndpointDeleteTakesItsMinutes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.put("audit", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 2)
		for i := range 3 {
			note, _ := outbox.FailedAttemptsNotes("billing", 1, e.NowMs()-int64(i)*20*minute)
			e.Apply(store.Batch{Writes: note})
		}
		note, _ := outbox.FailedAttemptsNotes("audit", 1, e.NowMs())
		e.Apply(store.Batch{Writes: note})
		if _, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", true); err != nil {
			t.Fatal(err)
		}
		start, end := schema.MinuteRange()
		for _, row := range e.scan(start, end) {
			if pk, _ := schema.Parse(row.Key); pk.Endpoint == "billing" {
				t.Errorf("minute row %+v left by the delete", pk)
			}
		}
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		if got := counted(e.perMinute("billing")); len(got) != 0 {
			t.Fatalf("the new billing counts %+v", got)
		}
		if got := counted(e.perMinute("audit")); len(got) != 1 {
			t.Fatalf("audit's minutes %+v", got)
		}
	})
}

// A bad endpoint id or a time before the first hour is refused; a minute
// row that does not decode is an error, never zeros.
func TestPerMinuteRefusesBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		a := e.admin()
		if _, err := a.PerMinute(e.Ctx, e.P, "Bad/Id", e.NowMs()); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("bad id: %v", err)
		}
		if _, err := a.PerMinute(e.Ctx, e.P, "billing", 30*minute); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("time in the first hour: %v", err)
		}
		if _, err := a.PerMinute(e.Ctx, store.Partition{Namespace: "Not A Namespace"}, "billing", e.NowMs()); err == nil {
			t.Error("bad namespace read")
		}
		k, _ := schema.MinuteKey("billing", e.NowMs())
		var b store.Batch
		b.Put(k, store.Value("junk"))
		e.Apply(b)
		if _, err := a.PerMinute(e.Ctx, e.P, "billing", e.NowMs()); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("corrupt minute: %v", err)
		}
	})
}
