package faults

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/internal/store"
)

// TestEvictingRedisIsReported starts relay on a Redis that may evict keys:
// it starts, warns, and /readyz says why it is not ready.
func TestEvictingRedisIsReported(t *testing.T) {
	s := newSuite(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	r := s.startRelay("a")
	if !strings.Contains(r.Log(), "maxmemory-policy") {
		t.Errorf("relay did not warn of the evicting policy at start:\n%s", r.Log())
	}
	resp, err := http.Get(r.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "evict") {
		t.Fatalf("/readyz on an evicting Redis: %d %q", resp.StatusCode, body)
	}
}

// TestPoisonRow writes an undecodable record by hand into a stream: the
// rows behind it are delivered, it stays and shows in the outbox view, and
// a fixed record or a forced delete of the endpoint clears it.
func TestPoisonRow(t *testing.T) {
	s, r, notify := newCase(t)
	const ns = "poison"
	st, err := redisstore.New(t.Context(), s.redis.Client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ids := rids(ns, 5)
	poisoned := ids[2]
	var fixed atomic.Bool
	var targets []target
	for _, id := range []string{"fixed", "deleted"} {
		rc := newReceiver(t, id, notify, relaytest.OK)
		// Disabled while the rows are poisoned, so none is tried before.
		r.must(http.StatusCreated, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/"+id, map[string]any{
			"url": rc.URL, "scheme": "standard-webhooks", "secret": rc.Secret, "enabled": false,
		})
		targets = append(targets, target{ns: ns, rc: rc})
	}
	p := newProducer(s, 1, r)
	p.post(ns, ids, 1)
	// The outcome's one log row serves both streams.
	seq := putLog(t, st, ns, poisoned, store.Value("not a record"))
	for _, tg := range targets {
		r.must(http.StatusOK, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/"+tg.rc.Name, map[string]any{
			"url": tg.rc.URL, "scheme": "standard-webhooks", "secret": tg.rc.Secret, "enabled": true,
		})
	}

	// Every row but the poisoned one is delivered to both endpoints.
	healthy := append(append([]string(nil), ids[:2]...), ids[3:]...)
	only := &producer{accepted: map[string][]string{ns: healthy}}
	settle(t, only, notify, targets...)
	for _, tg := range targets {
		// A row arrives before the fire that sent it acknowledges it.
		rows := outboxRows(t, r, ns, tg.rc.Name, 1)
		// The log row names the outcome, so the row shows by its place.
		row := rows[0].(map[string]any)
		if row["sequence"] != float64(seq) || row["corrupt"] != true {
			t.Fatalf("%s: outbox row %v, want %s's place, %d, marked corrupt", tg.rc.Name, row, poisoned, seq)
		}
	}

	// A forced delete drops the poisoned row with its endpoint.
	r.must(http.StatusOK, http.MethodDelete, "/v1/namespaces/"+ns+"/endpoints/deleted?force=true", nil)

	// A fixed log row is delivered to the endpoint left.
	record, err := schema.EncodeRecord(ptr(outboxtest.Committed(poisoned)))
	if err != nil {
		t.Fatal(err)
	}
	logRow, err := schema.EncodeLog(schema.LogRow{RID: poisoned, AcceptedMs: time.Now().UnixMilli(), Record: record,
		Entries: []schema.LogEntry{{Endpoint: "fixed", State: schema.EntryPending}}})
	if err != nil {
		t.Fatal(err)
	}
	put(t, st, ns, schema.LogKey(seq), logRow)
	fixed.Store(true)
	settle(t, p, notify, targets[0])

	if code, v, _, err := r.call(http.MethodGet, "/v1/namespaces/"+ns+"/endpoints/deleted", nil); err != nil || code != http.StatusNotFound {
		t.Fatalf("after a forced delete: %d %v %v", code, v, err)
	}
	left := 0
	for _, class := range []schema.Class{schema.ClassPending, schema.ClassAttempt} {
		start, end := schema.ClassRange(class)
		page, err := st.Scan(t.Context(), store.Partition{Namespace: ns}, start, end, nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			if k, ok := schema.Parse(e.Key); ok && k.Endpoint == "deleted" {
				left++
			}
		}
	}
	if left != 0 {
		t.Fatalf("%d rows of the deleted endpoint remain", left)
	}
	report(t, "poison row", p, 0, targets[0])
}

// putLog writes the log row of the outcome rid by hand, unguarded, as an
// operator (or a bug) could, and returns its sequence number.
func putLog(t testing.TB, st *redisstore.Store, ns, rid string, v store.Value) uint64 {
	t.Helper()
	key, _ := schema.SeenKey(rid)
	raw, found, err := st.Get(t.Context(), store.Partition{Namespace: ns}, key)
	if err != nil || !found {
		t.Fatalf("seen row of %s: %v %v", rid, found, err)
	}
	seen, err := schema.DecodeSeen(raw)
	if err != nil || !seen.Logged {
		t.Fatalf("seen row of %s: %+v %v", rid, seen, err)
	}
	put(t, st, ns, schema.LogKey(seen.Seq), v)
	return seen.Seq
}

// put writes one row by hand, unguarded.
func put(t testing.TB, st *redisstore.Store, ns string, key store.Key, v store.Value) {
	t.Helper()
	var b store.Batch
	b.Put(key, v)
	if res, err := st.Apply(t.Context(), store.Partition{Namespace: ns}, b); err != nil || !res.Committed {
		t.Fatalf("write record: %+v %v", res, err)
	}
}

func ptr[T any](v T) *T { return &v }

// outboxRows waits until the outbox view of a stream holds want rows, as
// the fires under way acknowledge what they delivered, and returns them.
func outboxRows(t testing.TB, r *relayProc, ns, endpoint string, want int) []any {
	t.Helper()
	var rows []any
	relaytest.Eventually(t, settleWithin, nil, func() error {
		v := r.must(http.StatusOK, http.MethodGet, "/v1/namespaces/"+ns+"/outbox?endpoint="+endpoint, nil)
		rows, _ = v["rows"].([]any)
		if len(rows) != want {
			return fmt.Errorf("%s: outbox view %v, want %d rows", endpoint, v, want)
		}
		return nil
	})
	return rows
}
