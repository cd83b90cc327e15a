package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

func (e *env) head(endpoint string) schema.Head {
	e.T.Helper()
	return outboxtest.Head(e.T, e.St, e.P, endpoint)
}

func (e *env) pendingRows(endpoint string) []string {
	e.T.Helper()
	start, end, _ := schema.PendingRange(endpoint)
	var rids []string
	for _, row := range e.scan(start, end) {
		pk, _ := schema.Parse(row.Key)
		rids = append(rids, pk.RID)
	}
	return rids
}

func queueRIDs(rows []outbox.QueueRow) []string {
	var rids []string
	for _, q := range rows {
		rids = append(rids, q.RID)
	}
	return rids
}

// Ingest into a stream without a head starts its head at the first new row
// and writes no pending row: the stream reads its queue from the log from
// there, and the rows it held pending before from their pending rows.
func TestIngestStartsTheHeadAtTheFirstRowOfAnEmptyStream(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("old", schema.Endpoint{Enabled: true})
		e.Append(committed("a"))
		first := e.pending("billing")[0].Seq
		if h := e.head("billing"); !h.Found || h.Seq != first {
			t.Fatalf("head %+v, want the first row's sequence number %d", h, first)
		}
		// A stream without a head that holds rows pending.
		e.unheaded("old")
		e.Append(committed("b"), aborted("c"))
		if got := e.pendingRows("billing"); len(got) != 0 {
			t.Fatalf("pending rows %v of a stream with a head", got)
		}
		if h := e.head("billing"); h.Seq != first {
			t.Fatalf("ingest moved the head to %d", h.Seq)
		}
		if got := queueRIDs(outboxtest.Queue(t, e.St, e.P, "billing")); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("queue %v, want a, b, c", got)
		}
		old := e.pending("old")
		if got := e.pendingRows("old"); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("an unheaded stream: pending rows %v, want only a's", got)
		}
		if h := e.head("old"); len(old) != 3 || !h.Found || h.Seq != old[1].Seq {
			t.Fatalf("an unheaded stream: head %+v, queue %+v; want the head at b's row", h, old)
		}
		if got := queueRIDs(outboxtest.Queue(t, e.St, e.P, "old")); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("queue %v, want a, b, c", got)
		}
		// Emptied, it reads the rows after from the log as before.
		if acked, err := outboxtest.AckPage(e.Ctx, e.St, e.P, "old", 3, false, outbox.Done{}); err != nil || len(acked) != 3 {
			t.Fatalf("ack: %v %v", acked, err)
		}
		e.Append(committed("d"))
		if got := queueRIDs(outboxtest.Queue(t, e.St, e.P, "old")); !slices.Equal(got, []string{"d"}) || len(e.pendingRows("old")) != 0 {
			t.Fatalf("after emptying: queue %v, pending rows %v", got, e.pendingRows("old"))
		}
	})
}

// A page reads the log from the head and lists each row of the queue once
// in sequence order: a pending row above the head (a resend writes one
// wherever its row is) is not listed again from its entry, and a cursor
// resumes after the last row a page listed.
func TestTheQueueListsEachRowOnceInSequenceOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		for i := range 6 {
			e.Append(committed(fmt.Sprintf("r-%d", i)))
		}
		q := outboxtest.Queue(t, e.St, e.P, "billing")
		// r-4's pending row, as a resend leaves it above the head.
		var b store.Batch
		b.Put(q[4].Key, store.Value{})
		e.Apply(b)
		head := e.head("billing")
		var got []string
		var after *store.Cursor
		for pages := 0; pages < 20; pages++ {
			page, err := outbox.ReadQueue(e.Ctx, e.St, e.P, "billing", head, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Rows) > 2 {
				t.Fatalf("a page of %d rows, limit 2", len(page.Rows))
			}
			for _, r := range page.Rows {
				if r.Logged == (r.RID == "r-4") {
					t.Fatalf("row %s listed with Logged %v", r.RID, r.Logged)
				}
			}
			got = append(got, queueRIDs(page.Rows)...)
			if page.Next == nil {
				break
			}
			after = page.Next
		}
		if want := []string{"r-0", "r-1", "r-2", "r-3", "r-4", "r-5"}; !slices.Equal(got, want) {
			t.Fatalf("paged %v, want %v", got, want)
		}
	})
}

// Log rows the stream's filter does not take cost a page its reads but
// are not listed: a page may come back empty with a Next, and the walk
// still ends at the stream's rows.
func TestAPageOfOtherStreamsRowsIsEmptyAndGoesOn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("all", schema.Endpoint{Enabled: true})
		e.putEndpoint("aborts", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		e.Append(aborted("first"))
		for i := range 30 {
			e.Append(committed(fmt.Sprintf("c-%02d", i)))
		}
		e.Append(aborted("last"))
		head := e.head("aborts")
		page, err := outbox.ReadQueue(e.Ctx, e.St, e.P, "aborts", head, nil, 1)
		if err != nil || !slices.Equal(queueRIDs(page.Rows), []string{"first"}) || !page.FromHead {
			t.Fatalf("first page %+v, %v", page, err)
		}
		page, err = outbox.ReadQueue(e.Ctx, e.St, e.P, "aborts", head, page.Next, 1)
		if err != nil || len(page.Rows) != 0 || page.Next == nil || page.FromHead {
			t.Fatalf("a page of other streams' rows: %+v, %v; want empty with a Next", page, err)
		}
		if got := queueRIDs(outboxtest.Queue(t, e.St, e.P, "aborts")); !slices.Equal(got, []string{"first", "last"}) {
			t.Fatalf("queue %v", got)
		}
	})
}

// A log row that does not decode is listed as a corrupt row at its place:
// it is seen, and nothing moves past it unseen.
func TestAnUndecodableLogRowIsListedCorrupt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("a"), committed("b"), committed("c"))
		q := outboxtest.Queue(t, e.St, e.P, "billing")
		var b store.Batch
		b.Put(schema.LogKey(q[1].Seq), store.Value("not a log row"))
		e.Apply(b)
		got := outboxtest.Queue(t, e.St, e.P, "billing")
		if len(got) != 3 || !got[1].Corrupt || got[1].Seq != q[1].Seq || got[1].RID != "" || got[0].Corrupt || got[2].Corrupt {
			t.Fatalf("queue %+v, want b's place corrupt", got)
		}
	})
}

// An acknowledgement of a row the log alone queues is guarded by its
// entry: sent again after it applied, it fails rather than count twice,
// and so does one planned from the same read as another that landed
// first.
func TestAnAcknowledgementOfALogRowIsGuardedByItsEntry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		e.Append(committed("a"), committed("b"), committed("c"))
		plan := func(rid string) store.Batch {
			acks := freshAcks(t, e, "billing")
			rec, ok := e.record("billing", rid)
			if !ok {
				t.Fatalf("%s is not queued", rid)
			}
			for _, pk := range e.pending("billing") {
				if pk.RID == rid {
					if err := acks.Add(rid, pk.Seq, rec, outbox.Done{AtMs: e.NowMs(), Status: 204}); err != nil {
						t.Fatal(err)
					}
				}
			}
			var b store.Batch
			acks.Plan(&b)
			return b
		}
		b := plan("a")
		if res := e.Apply(b); !res.Committed {
			t.Fatalf("acknowledgement failed precondition %d", res.Failed)
		}
		if res := e.Apply(b); res.Committed {
			t.Fatal("the acknowledgement applied twice")
		}
		// Two fires' plans of b from one read: the second to land finds
		// b's entry rewritten.
		first, second := plan("b"), plan("b")
		if res := e.Apply(first); !res.Committed {
			t.Fatalf("acknowledgement of b failed precondition %d", res.Failed)
		}
		if res := e.Apply(second); res.Committed {
			t.Fatal("b was acknowledged twice")
		}
		if got := queueRIDs(outboxtest.Queue(t, e.St, e.P, "billing")); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("queue %v after a's and b's acknowledgements", got)
		}
		if bl, _ := e.backlog("billing"); bl.Rows != 1 {
			t.Fatalf("backlog %+v, want 1 row", bl)
		}
		// Another stream's entry in the same rows changes nothing of it.
		if got := queueRIDs(outboxtest.Queue(t, e.St, e.P, "audit")); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("audit queue %v", got)
		}
	})
}

// Keep gives a row of the log's queue a pending row, so the head can pass
// it and it stays queued; the head's move alone takes nothing out of the
// queue but rows already done.
func TestAKeptRowStaysQueuedBehindAMovedHead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("a"), committed("b"), committed("c"))
		q := outboxtest.Queue(t, e.St, e.P, "billing")
		acks := freshAcks(t, e, "billing")
		for _, i := range []int{0, 2} {
			rec, _ := e.record("billing", q[i].RID)
			if err := acks.Add(q[i].RID, q[i].Seq, rec, outbox.Done{AtMs: e.NowMs(), Status: 204}); err != nil {
				t.Fatal(err)
			}
		}
		rec, _ := e.record("billing", "b")
		if err := acks.Keep("b", q[1].Seq, rec); err != nil {
			t.Fatal(err)
		}
		// Only a row the log alone queues can be kept.
		if err := acks.Keep("b", q[1].Seq+1, rec); err == nil {
			t.Fatal("kept a row under another sequence number")
		}
		acks.MoveHead(q[2].Seq + 1)
		var b store.Batch
		acks.Plan(&b)
		if b.Ops() > outbox.AckOps(2)+2+1 {
			t.Errorf("%d operations for two acknowledgements, a kept row and a head", b.Ops())
		}
		if res := e.Apply(b); !res.Committed {
			t.Fatalf("failed precondition %d", res.Failed)
		}
		if h := e.head("billing"); h.Seq != q[2].Seq+1 {
			t.Fatalf("head %+v, want %d", h, q[2].Seq+1)
		}
		got := outboxtest.Queue(t, e.St, e.P, "billing")
		if len(got) != 1 || got[0].RID != "b" || got[0].Logged {
			t.Fatalf("queue %+v, want b by its pending row", got)
		}
		// Sent again, the kept row's guard fails it: its entry is as read,
		// but the acknowledged rows' are not.
		if res := e.Apply(b); res.Committed {
			t.Fatal("the plan applied twice")
		}
	})
}

// The outbox view fills its page past log rows of other streams, so an
// operator does not see an empty page while the stream's rows are further
// on.
func TestTheOutboxViewFillsItsPagePastOtherStreamsRows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("all", schema.Endpoint{Enabled: true})
		e.putEndpoint("aborts", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		e.Append(aborted("first"))
		for i := range 40 {
			e.Append(committed(fmt.Sprintf("c-%02d", i)))
		}
		e.Append(aborted("last"))
		page, err := e.admin().Pending(e.Ctx, e.P, "aborts", nil, 2)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range page.Rows {
			got = append(got, r.RID)
		}
		if !slices.Equal(got, []string{"first", "last"}) {
			t.Fatalf("one page of 2 lists %v, want first and last", got)
		}
	})
}

// ReadArrived lists, among rows ingest just appended, those the stream
// waits on, with their outcomes and attempts, by key: another stream's row
// or one already done is passed, one that does not decode or holds
// another rid is listed corrupt, and the limit ends the page with a Next
// at the first row left.
func TestReadArrivedListsTheStreamsRowsAmongThoseAppended(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("all", schema.Endpoint{Enabled: true})
		e.putEndpoint("aborts", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		os := []schema.Outcome{aborted("a"), committed("b"), aborted("c"), aborted("d"), aborted("e")}
		st := e.Append(os...)
		refs := make([]outbox.StreamRef, len(os))
		for i, s := range st {
			refs[i] = outbox.StreamRef{Seq: s.Seq, RID: os[i].ReservationID}
		}
		attempts, err := schema.EncodeAttempts(schema.Attempts{}.With(schema.Attempt{AtMs: 5, Status: 503, ErrorClass: "status"}))
		if err != nil {
			t.Fatal(err)
		}
		key, _ := schema.AttemptKey("aborts", "c")
		var b store.Batch
		b.Put(key, attempts)
		// d's log row holds another rid.
		other, _ := e.Get(schema.LogKey(refs[0].Seq))
		b.Put(schema.LogKey(refs[3].Seq), other)
		e.Apply(b)

		page, rows, err := outbox.ReadArrived(e.Ctx, e.St, e.P, "aborts", refs, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := queueRIDs(page.Rows); !slices.Equal(got, []string{"a", "c", "", "e"}) || !page.Rows[2].Corrupt || page.Rows[2].Seq != refs[3].Seq {
			t.Fatalf("page %+v, want a, c, d's place corrupt, e", page.Rows)
		}
		if page.Next != nil || page.LogEnd != refs[4].Seq+1 || len(rows) != 4 {
			t.Fatalf("next %v, log end %d, %d rows", page.Next, page.LogEnd, len(rows))
		}
		if !rows[0].Found || rows[0].Outcome.ReservationID != "a" || rows[1].Attempts.Total != 1 || !rows[1].Record.HasAttempts || rows[0].Record.HasAttempts {
			t.Fatalf("rows %+v", rows)
		}
		for _, q := range page.Rows {
			if !q.Logged || (!q.Corrupt && q.Log == nil) {
				t.Fatalf("row %+v: a log row the log alone queues, its log row with it", q)
			}
		}
		// Cut short, the page resumes at the first row left, as the queue does.
		page, _, err = outbox.ReadArrived(e.Ctx, e.St, e.P, "aborts", refs, 1)
		if err != nil || !slices.Equal(queueRIDs(page.Rows), []string{"a"}) || page.Next == nil || page.LogEnd != refs[1].Seq {
			t.Fatalf("a page of 1: %+v, %v", page, err)
		}
		rest, err := outbox.ReadQueue(e.Ctx, e.St, e.P, "aborts", e.head("aborts"), page.Next, 10)
		if err != nil || queueRIDs(rest.Rows)[0] != "c" {
			t.Fatalf("the queue after it: %+v, %v", rest, err)
		}
		if _, _, err := outbox.ReadArrived(e.Ctx, e.St, e.P, "aborts", []outbox.StreamRef{refs[0], refs[2]}, 10); err == nil {
			t.Fatal("rows not consecutive were read")
		}
	})
}

// noReads is a store whose reads by key fail: what is read through it
// must need none.
type noReads struct{ store.NamespaceStore }

func (noReads) GetMany(context.Context, store.Partition, []store.Key) ([]store.Row, error) {
	return nil, errors.New("read by key")
}

// A Fresh ref, the row as its ingest committed it, is taken with no read;
// refs that are not are read beside it, each matched to its own rows.
func TestReadArrivedTakesAFreshRowAsItsIngestCommittedIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("aborts", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		os := []schema.Outcome{aborted("a"), aborted("b"), aborted("c"), aborted("d")}
		st := e.Append(os...)
		refs := make([]outbox.StreamRef, len(os))
		for i, s := range st {
			refs[i] = s.Ref(os[i].ReservationID)
		}
		page, rows, err := outbox.ReadArrived(e.Ctx, noReads{e.St}, e.P, "aborts", refs, 10)
		if err != nil || !slices.Equal(queueRIDs(page.Rows), []string{"a", "b", "c", "d"}) || rows[3].Outcome.ReservationID != "d" {
			t.Fatalf("fresh rows: %+v, %+v, %v", page.Rows, rows, err)
		}
		attempts, err := schema.EncodeAttempts(schema.Attempts{}.With(schema.Attempt{AtMs: 5, Status: 503, ErrorClass: "status"}))
		if err != nil {
			t.Fatal(err)
		}
		key, _ := schema.AttemptKey("aborts", "b")
		var b store.Batch
		b.Put(key, attempts)
		e.Apply(b)
		refs[1].Fresh, refs[1].Log = false, nil
		refs[3].Fresh = false
		page, rows, err = outbox.ReadArrived(e.Ctx, e.St, e.P, "aborts", refs, 10)
		if err != nil || !slices.Equal(queueRIDs(page.Rows), []string{"a", "b", "c", "d"}) {
			t.Fatalf("mixed rows: %+v, %v", page.Rows, err)
		}
		for i, r := range rows {
			if r.Outcome.ReservationID != os[i].ReservationID || r.Record.HasAttempts != (i == 1) {
				t.Fatalf("row %d: %+v", i, r)
			}
		}
		if rows[1].Attempts.Total != 1 || !bytes.Equal(page.Rows[0].Log, st[0].Log) {
			t.Fatalf("rows %+v", rows)
		}
	})
}

// scanLimits is a store that records the limit of every scan of the log.
type scanLimits struct {
	store.NamespaceStore
	log []int
}

func (s *scanLimits) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	if pk, ok := schema.Parse(start); ok && pk.Class == schema.ClassLog {
		s.log = append(s.log, limit)
	}
	return s.NamespaceStore.Scan(ctx, p, start, end, after, limit)
}

// A dense page, of a stream whose endpoint takes every kind, examines its
// limit and QueueLogSlack log rows, not twice its limit; a page that finds
// rows the stream is done with among them lists fewer and goes on, so the
// walk still lists every row once.
func TestADensePageExaminesItsLimitAndTheSlack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("all", schema.Endpoint{Enabled: true})
		var want []string
		for i := range 40 {
			rid := fmt.Sprintf("r-%02d", i)
			e.Append(committed(rid))
			want = append(want, rid)
		}
		// The first three rows done, read from the head as it was before
		// they were: rows the stream is done with, from the head on.
		head := e.head("all")
		if acked, err := outboxtest.AckPage(e.Ctx, e.St, e.P, "all", 3, false, outbox.Done{}); err != nil || len(acked) != 3 {
			t.Fatalf("ack: %v %v", acked, err)
		}
		st := &scanLimits{NamespaceStore: e.St}
		var got []string
		var after *store.Cursor
		for pages := 0; pages < 20; pages++ {
			page, err := outbox.ReadQueueTo(e.Ctx, st, e.P, "all", head, after, 10, 0, true)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, queueRIDs(page.Rows)...)
			if page.Next == nil {
				break
			}
			after = page.Next
		}
		if !slices.Equal(got, want[3:]) {
			t.Fatalf("paged %v, want %v", got, want[3:])
		}
		for _, l := range st.log {
			if l != 10+outbox.QueueLogSlack {
				t.Fatalf("dense pages scanned the log %v rows at a time, want %d", st.log, 10+outbox.QueueLogSlack)
			}
		}
		st.log = nil
		if _, err := outbox.ReadQueueTo(e.Ctx, st, e.P, "all", head, nil, 10, 0, false); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.log, []int{outbox.QueueLogRows * 10}) {
			t.Fatalf("a page that is not dense scanned %v, want %d", st.log, outbox.QueueLogRows*10)
		}
	})
}
