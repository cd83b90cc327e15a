package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

func TestTheExcerptBoundIsTheChannels(t *testing.T) {
	if outbound.MaxExcerptBytes != schema.MaxExcerptBytes {
		t.Fatalf("the channel keeps %d bytes, the attempt row %d", outbound.MaxExcerptBytes, schema.MaxExcerptBytes)
	}
}

func TestEachFailedCallIsTimedByTheHandlersClock(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		start := e.NowMs()
		slow := SinkFunc(func(context.Context, Parcel) error {
			e.Clk.Advance(1234 * time.Millisecond) // the call takes 1.234 s by the handler's clock
			return &Error{Class: "status", Status: 503, Excerpt: []byte("busy\x00\xff try later\n")}
		})
		e.fire(&Handler{Sink: slow, Clock: e.Clk})
		h, ok := e.attempts("a")
		if !ok || len(h.Last) != 1 || h.Total != 1 {
			t.Fatalf("attempts %+v (found %v)", h, ok)
		}
		want := schema.Attempt{AtMs: start + 1234, DurationMs: 1234, Status: 503, ErrorClass: "status", Excerpt: "busy\uFFFD\uFFFD try later "}
		if h.Last[0] != want {
			t.Fatalf("attempt\n %+v\nwant\n %+v", h.Last[0], want)
		}
	})
}

func TestARowKeepsItsLastTenAttemptsAndCountsThemAll(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		n := 0
		failing := SinkFunc(func(context.Context, Parcel) error {
			n++
			return &Error{Class: "status", Status: 500, Excerpt: fmt.Appendf(nil, "failure %d", n)}
		})
		var ends []int64
		for range schema.MaxAttempts + 2 {
			e.fireAtDue(&Handler{Sink: failing, Clock: e.Clk})
			ends = append(ends, e.NowMs())
		}
		h, _ := e.attempts("a")
		if h.Total != schema.MaxAttempts+2 || len(h.Last) != schema.MaxAttempts {
			t.Fatalf("total %d, %d kept", h.Total, len(h.Last))
		}
		for i, a := range h.Last {
			if want := fmt.Sprintf("failure %d", i+3); a.Excerpt != want || a.AtMs != ends[i+2] {
				t.Fatalf("attempt %d: %q at %d, want %q at %d: the oldest go, the newest stay last", i, a.Excerpt, a.AtMs, want, ends[i+2])
			}
		}
		if a, _ := e.attempt("a"); a.Count != schema.MaxAttempts+2 {
			t.Fatalf("count %d", a.Count)
		}
	})
}

// The completion of a fire carries, besides the timer's three operations
// (guard, delete, put) and a 410's two (endpoint guard and disable), its
// acknowledgements (outbox.AckOps: 4 per row, 2 for the backlog, 1 Add
// to the stream's counters and outbox.MinuteOps for its minute), one Put per
// failed call, whatever the attempt row holds, and the count of failed
// calls, which joins the acknowledgements' Adds (or stands for them when
// nothing was acknowledged, where the plan is at most 2 operations), except
// that its minute may be the next one, MinuteOps more. A page has at most
// MaxRowsCeiling rows, each delivered or failed at most once, and at most
// MaxMaxInFlight calls fail (the first failure launches nothing more; the
// open calls finish). So with f failed calls the completion is at most
// AckOps(MaxRowsCeiling-f) + f + MinuteOps + 5 operations, with the head's
// move and the refused rows kept (1 + 2f) beside them, and the release
// that carries the notes when a guard fails 3 + f + 1 + MinuteOps. The
// ceiling is the most rows that fit: one more does not.
func TestAFiresAttemptRowsFitItsBatch(t *testing.T) {
	completion := func(rows, f int) int {
		n := outbox.AckOps(rows-f) + f + 3 + 2 + 1 + 2*f
		if f > 0 {
			n += outbox.MinuteOps
		}
		return n
	}
	tight := false
	for f := 0; f <= schema.MaxMaxInFlight; f++ {
		if n := completion(MaxRowsCeiling, f); n > store.MaxBatchOps || 3+f+1+outbox.MinuteOps > store.MaxBatchOps {
			t.Fatalf("%d failed calls: a completion of %d operations", f, n)
		}
		tight = tight || completion(MaxRowsCeiling+1, f) > store.MaxBatchOps
		if outbox.AckOps(0) < 2+1 {
			t.Fatalf("AckOps(0) = %d does not cover an empty plan and the count of failed calls", outbox.AckOps(0))
		}
	}
	if !tight {
		t.Errorf("a completion of %d rows fits too: MaxRowsCeiling could be higher", MaxRowsCeiling+1)
	}
}

func TestAFullPageOfFailingRowsWithFullAttemptRowsIsRecorded(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: schema.MaxMaxInFlight})
		worst := schema.Attempt{AtMs: t0, DurationMs: 5000, Status: 599,
			ErrorClass: strings.Repeat("x", schema.MaxErrorClassBytes), Excerpt: strings.Repeat("y", schema.MaxExcerptBytes)}
		full := schema.Attempts{Total: 99}
		for range schema.MaxAttempts {
			full.Last = append(full.Last, worst)
		}
		v, err := schema.EncodeAttempts(full)
		if err != nil {
			t.Fatal(err)
		}
		var rids []string
		for i := range MaxRowsCeiling {
			rids = append(rids, fmt.Sprintf("r-%02d", i))
		}
		e.seed(rids...)
		for _, rid := range rids {
			key, _ := schema.AttemptKey(ep, rid)
			e.put(key, v)
		}
		// Every call waits until all of the window is open, then fails:
		// MaxMaxInFlight failed calls in one fire.
		all := make(chan struct{})
		arrived := make(chan struct{}, schema.MaxMaxInFlight)
		go func() {
			for range schema.MaxMaxInFlight {
				<-arrived
			}
			close(all)
		}()
		failing := SinkFunc(func(ctx context.Context, _ Parcel) error {
			arrived <- struct{}{}
			select {
			case <-all:
			case <-ctx.Done():
			}
			return &Error{Class: "status", Status: 503, Excerpt: []byte(strings.Repeat("z", 1<<10))}
		})
		e.fire(&Handler{Sink: failing, Clock: e.Clk, MaxRows: MaxRowsCeiling})
		recorded := 0
		for _, rid := range rids {
			h, _ := e.attempts(rid)
			switch h.Total {
			case 100:
				recorded++
				if last, _ := h.Latest(); len(h.Last) != schema.MaxAttempts || last.Excerpt != strings.Repeat("z", schema.MaxExcerptBytes) {
					t.Fatalf("%s: %d kept, last %+v", rid, len(h.Last), last)
				}
			case 99:
			default:
				t.Fatalf("%s: total %d", rid, h.Total)
			}
		}
		if recorded != schema.MaxMaxInFlight {
			t.Fatalf("%d rows recorded a failure, want %d", recorded, schema.MaxMaxInFlight)
		}
	})
}
