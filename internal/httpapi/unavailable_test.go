package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/testlog"
)

// downStore is a store whose every call fails with err.
type downStore struct{ err error }

func (d downStore) Get(context.Context, store.Partition, store.Key) (store.Value, bool, error) {
	return nil, false, d.err
}

func (d downStore) GetMany(context.Context, store.Partition, []store.Key) ([]store.Row, error) {
	return nil, d.err
}

func (d downStore) Scan(context.Context, store.Partition, store.Key, store.Key, *store.Cursor, int) (store.Page, error) {
	return store.Page{}, d.err
}

func (d downStore) ScanUnordered(context.Context, store.Partition, *store.Cursor, int) (store.Page, error) {
	return store.Page{}, d.err
}

func (d downStore) Apply(context.Context, store.Partition, store.Batch) (store.Result, error) {
	return store.Result{}, d.err
}

func (d downStore) Buckets() int                 { return 1 }
func (d downStore) BucketOf(store.Partition) int { return 0 }
func (d downStore) Registered(context.Context, int, string, int) ([]store.Partition, bool, error) {
	return nil, false, d.err
}
func (d downStore) CountRegistered(context.Context) (int, error) { return 0, d.err }

// records are the JSON log lines of b with message msg.
func records(t *testing.T, b *testlog.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(b.String())), []byte("\n")) {
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// wantUnavailable checks a 503 unavailable answer that tells the client when
// to retry.
func wantUnavailable(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	want(t, rec, http.StatusServiceUnavailable, httpapi.SlugUnavailable)
	if got := rec.Header().Get("Retry-After"); got != "2" {
		t.Fatalf("Retry-After %q, want 2", got)
	}
}

// storeRoutes is one request on every route that reaches the store.
func storeRoutes() []struct{ method, path, body string } {
	list := `{"outcomes": [` + outcomeJSON("b-1", "committed") + `,` + outcomeJSON("b-2", "aborted") + `]}`
	return []struct{ method, path, body string }{
		{http.MethodPost, outcomesPath, committedJSON},
		{http.MethodPost, outcomesPath, list},
		{http.MethodPut, "/v1/namespaces/acme/endpoints/billing", `{"url": "https://billing.example.com/hooks"}`},
		{http.MethodGet, "/v1/namespaces/acme/endpoints/billing", ""},
		{http.MethodGet, "/v1/namespaces/acme/endpoints", ""},
		{http.MethodDelete, "/v1/namespaces/acme/endpoints/billing", ""},
		{http.MethodDelete, "/v1/namespaces/acme/endpoints/billing?force=true", ""},
		{http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=billing", ""},
		{http.MethodPost, "/v1/admin/namespaces/acme/endpoints/billing/outcomes/r-7f3a/replay", ""},
		{http.MethodGet, "/v1/namespaces", ""},
	}
}

// TestUnavailableStoreIsA503ThatSaysWhenToRetry: a store that is away
// answers every route with 503 unavailable and Retry-After, never 500 and
// never per-item errors; the cause goes to the log, not to the client.
func TestUnavailableStoreIsA503ThatSaysWhenToRetry(t *testing.T) {
	cause := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 6379}, Err: syscall.ECONNREFUSED}
	down := downStore{err: fmt.Errorf("scan acme: %w: %w", store.ErrUnavailable, cause)}
	for _, coalesce := range []bool{false, true} {
		t.Run("coalesce="+strconv.FormatBool(coalesce), func(t *testing.T) {
			var logs testlog.Buffer
			h := newHarnessOn(t, down, apiOptions{coalesce: coalesce, logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			for _, r := range storeRoutes() {
				rec := h.do(r.method, r.path, h.admin(), r.body)
				wantUnavailable(t, rec)
				id := rec.Header().Get(httpapi.HeaderRequestID)
				if id == "" {
					t.Fatalf("%s %s: no request id", r.method, r.path)
				}
				// The request id is random and may hold "6379" by chance.
				body := strings.ReplaceAll(rec.Body.String(), id, "<request id>")
				for _, internal := range []string{"10.9.8.7", "6379", "refused", "dial", "scan", "store: "} {
					if strings.Contains(body, internal) {
						t.Fatalf("%s %s: the answer shows %q: %s", r.method, r.path, internal, body)
					}
				}
				var logged bool
				for _, l := range records(t, &logs, "store unavailable") {
					if l["request_id"] == id {
						logged = true
						if l["level"] != "WARN" || !strings.Contains(fmt.Sprint(l["error"]), "10.9.8.7:6379") {
							t.Fatalf("%s %s: logged %v, want the cause at WARN", r.method, r.path, l)
						}
					}
				}
				if !logged {
					t.Fatalf("%s %s: request %s not logged as store unavailable", r.method, r.path, id)
				}
			}
		})
	}
}

// TestStoppedRedisAnswers503: with relay's Redis gone, ingest, a list
// included, is one 503 the producer retries.
func TestStoppedRedisAnswers503(t *testing.T) {
	srv := redistest.StartServer(t)
	// One try per call: go-redis's own retries only make the test slower.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	h := newHarness(t, client, redisstore.DefaultPrefix)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	tok := h.token("acme", httpapi.ScopeOutcomesWrite)
	want(t, h.do(http.MethodPost, outcomesPath, tok, committedJSON), http.StatusAccepted, "")

	srv.Stop()
	wantUnavailable(t, h.do(http.MethodPost, outcomesPath, tok, outcomeJSON("r-2", "committed")))
	list := `{"outcomes": [` + outcomeJSON("b-1", "committed") + `,` + committedJSON + `,` + outcomeJSON("b-2", "aborted") + `]}`
	wantUnavailable(t, h.do(http.MethodPost, outcomesPath, tok, list))
	wantUnavailable(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints", h.admin(), ""))
}

// TestFullRedisRefusesIngestWholeWith503: a Redis at maxmemory refuses a
// list of outcomes with 503 and stores none of it; once memory is freed,
// the same request is accepted.
func TestFullRedisRefusesIngestWholeWith503(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	h := newHarness(t, srv.Client, redisstore.DefaultPrefix)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	h.putEndpoint("acme", "audit", `{"url": "https://audit.example.com/hooks"}`)

	ctx := t.Context()
	value := strings.Repeat("x", 32<<10)
	var fill []string
	for {
		if len(fill) == 1000 {
			t.Fatal("a Redis at 2 MB took 32 MB")
		}
		key := "fill:" + strconv.Itoa(len(fill))
		err := srv.Client.Set(ctx, key, value, 0).Err()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "OOM ") {
				t.Fatalf("filling Redis: %v", err)
			}
			break
		}
		fill = append(fill, key)
	}

	before := h.dump()
	tok := h.token("acme", httpapi.ScopeOutcomesWrite)
	list := `{"outcomes": [` + outcomeJSON("b-1", "committed") + `,` + committedJSON + `,` + outcomeJSON("b-2", "aborted") + `]}`
	wantUnavailable(t, h.do(http.MethodPost, outcomesPath, tok, list))
	if after := h.dump(); !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused list changed relay's keys:\nbefore %v\nafter  %v", before, after)
	}

	if err := srv.Client.Del(ctx, fill...).Err(); err != nil {
		t.Fatal(err)
	}
	body := want(t, h.do(http.MethodPost, outcomesPath, tok, list), http.StatusAccepted, "")
	if got := results(t, body); !reflect.DeepEqual(got, []string{"b-1=accepted", "r-7f3a=accepted", "b-2=accepted"}) {
		t.Fatalf("the retried list answered %v", got)
	}
}

// TestIngestPastTheLargestBacklogIsA503: a backlog count ingest would take
// past what the store counts is refused whole as unavailable until
// deliveries drain it, never a 500, and the answer shows no internals.
func TestIngestPastTheLargestBacklogIsA503(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		key, _ := schema.BacklogKey("billing")
		var b store.Batch
		b.Put(key, schema.EncodeBacklog(schema.Backlog{Rows: 1, Bytes: store.MaxCounter - 10}))
		if res, err := h.st.Apply(t.Context(), store.Partition{Namespace: "acme"}, b); err != nil || !res.Committed {
			t.Fatalf("put backlog: %+v, %v", res, err)
		}
		before := h.dump()
		rec := h.do(http.MethodPost, outcomesPath, h.token("", httpapi.ScopeOutcomesWrite), committedJSON)
		wantUnavailable(t, rec)
		if body := rec.Body.String(); !strings.Contains(body, "backlog") || strings.Contains(body, "outbox:") || strings.Contains(body, "billing") {
			t.Fatalf("answer %s: want the backlog named, no internals", body)
		}
		if after := h.dump(); !reflect.DeepEqual(after, before) {
			t.Fatalf("a refused ingest wrote: %v, was %v", after, before)
		}
	})
}

// TestAnUnreplicatedErasureOrDeleteIs503: under replicas=1, an erasure or
// an endpoint's delete that no replica acknowledged (miniredis answers
// WAIT with 0) is answered 503 unavailable, never done: a failover could
// bring back what the answer said was gone.
func TestAnUnreplicatedErasureOrDeleteIs503(t *testing.T) {
	_, m := redistest.MiniredisServer(t, redisstore.Options{})
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	setup := newHarness(t, client, redisstore.DefaultPrefix)
	setup.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	want(t, setup.do(http.MethodPost, outcomesPath, setup.token("acme", httpapi.ScopeOutcomesWrite), committedJSON), http.StatusAccepted, "")
	setup.putEndpoint("acme", "idle", `{"url": "https://idle.example.com/hooks"}`)

	durable := redistest.NewStore(t, client, redisstore.Options{Durability: redisstore.Durability{Replicas: 1, Timeout: 20 * time.Millisecond}})
	h := newHarnessOn(t, durable, apiOptions{})
	wantUnavailable(t, h.do(http.MethodDelete, "/v1/namespaces/acme/outcomes/r-7f3a", h.admin(), ""))
	wantUnavailable(t, h.do(http.MethodDelete, "/v1/namespaces/acme/endpoints/idle", h.admin(), ""))
}
