package delivery

import (
	"context"
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/testlog"
)

// A backlog row counting beyond what the store can reduce (bytes at 2^53,
// which only damage writes) would have every acknowledgement refused and
// the same rows sent at every lease. The stream sends nothing instead, backs
// off as a failing endpoint does, and logs each fire at Error naming the
// stream; once the row is repaired, delivery resumes.
func TestABacklogBeyondTheStoresRangeHoldsTheStreamWithoutSending(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b", "c")
		key, _ := schema.BacklogKey(ep)
		v := []byte{1}
		v = binary.BigEndian.AppendUint64(v, 3)
		v = binary.BigEndian.AppendUint64(v, 1<<53)
		e.put(key, v)
		var logs testlog.Buffer
		sink := &capture{}
		h := &Handler{Sink: sink, MaxRows: 1, Clock: e.Clk, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
		var waits []int64
		for round := range 3 {
			before := e.NowMs()
			e.fireAtDue(h)
			if sink.count("a") != 0 {
				t.Fatalf("round %d: row a sent %d times while its acknowledgement cannot commit", round, sink.count("a"))
			}
			if st := e.state(); st.FailedFires != uint32(round+1) {
				t.Fatalf("round %d: failed fires %d, want %d", round, st.FailedFires, round+1)
			}
			waits = append(waits, e.timerDue()-max(before, e.NowMs()))
		}
		if !(waits[0] >= 1000 && waits[1] > waits[0] && waits[2] > waits[1]) {
			t.Fatalf("waits %v ms, want a growing backoff from 1 s", waits)
		}
		var held int
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, `"namespace":"acme"`) && strings.Contains(line, `"endpoint":"ep"`) {
				held++
			}
		}
		if held != 3 {
			t.Fatalf("%d error lines naming the stream, want 3:\n%s", held, logs.String())
		}

		// Repaired (the bytes need not be exact: they stop at 0).
		e.put(key, schema.EncodeBacklog(schema.Backlog{Rows: 3}))
		e.fireAtDue(h)
		if sink.count("a") != 1 || e.backlogRows() != 2 || len(e.pending()) != 2 {
			t.Fatalf("after the repair: a sent %d times, backlog %d rows, pending %v", sink.count("a"), e.backlogRows(), e.pending())
		}
	})
}

// deleting is a sink that deletes the stream's backlog row at its first
// call, as deleting the endpoint does while its fire runs.
type deleting struct {
	capture
	e    *env
	once sync.Once
}

func (d *deleting) Deliver(ctx context.Context, o Parcel) error {
	d.once.Do(func() {
		key, _ := schema.BacklogKey(ep)
		var b store.Batch
		b.Delete(key)
		d.e.Apply(b)
	})
	return d.capture.Deliver(ctx, o)
}

// A fire whose every acknowledgement is refused (its stream's backlog gone
// under it) logs one warning for the page, naming how many rows, not one a
// row.
func TestRefusedAcknowledgementsAreLoggedOnceAFire(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b", "c", "d", "e")
		var logs testlog.Buffer
		sink := &deleting{e: e}
		h := &Handler{Sink: sink, MaxRows: 5, Clock: e.Clk, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
		e.fire(h)
		if got := sink.rids(); len(got) != 5 {
			t.Fatalf("delivered %v, want all 5", got)
		}
		var lines []string
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if strings.Contains(line, "acknowledgement not planned") {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], `"rows":5`) || !strings.Contains(lines[0], `"reservation_id":"a"`) {
			t.Fatalf("warnings %q, want one naming 5 rows and the first, a:\n%s", lines, logs.String())
		}
	})
}
