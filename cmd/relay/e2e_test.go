package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/internal/signing"
)

// settle bounds every wait of these tests; deliveries normally take
// milliseconds.
const settle = 30 * time.Second

func TestMain(m *testing.M) {
	os.Exit(relaytest.Main(m))
}

// startRelay runs the binary with env and waits until it listens; in
// development it also waits for the admin token it prints.
func startRelay(t *testing.T, env []string, dev bool) (*relaytest.Relay, string) {
	t.Helper()
	p := relaytest.Start(t, relaytest.Config{Env: env, Dev: dev})
	return p, p.Token
}

// startOnRealRedis runs the binary, named name, on the Redis at
// RELAY_TEST_REDIS_URL under a key prefix of the test's own, and returns it
// with the credentials it takes; it skips the test where that Redis is not
// configured.
func startOnRealRedis(t *testing.T, name, subject string) (*relaytest.Relay, relaytest.Credentials) {
	t.Helper()
	client := redistest.RealClient(t)
	prefix := redistest.Prefix(t, client)
	creds := relaytest.NewCredentials(t, subject)
	env := append(creds.Env(os.Getenv(redistest.EnvRedisURL)), "RELAY_REDIS_PREFIX="+prefix)
	return relaytest.Start(t, relaytest.Config{Name: name, Env: env}), creds
}

// receiver verifies every request with both schemes; while refused is set,
// it answers 503 to that reservation id.
type receiver struct {
	*relaytest.Receiver
	notify chan struct{}
	// refuse is read by the server's goroutines as the test sets it.
	refuse atomic.Pointer[string]
}

func startReceiver(t *testing.T, relayURL string) *receiver {
	t.Helper()
	list, err := loadKeyList(context.Background(), relayURL+signing.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{notify: make(chan struct{}, 1)}
	rc.Receiver = relaytest.NewReceiver(t, relaytest.ReceiverConfig{
		Notify: rc.notify,
		Script: func(rid string, _ int) relaytest.Answer {
			if refused := rc.refuse.Load(); refused != nil && *refused == rid {
				return relaytest.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"600"}}}
			}
			return relaytest.Answer{Status: http.StatusNoContent}
		},
		Verifier: func(r *relaytest.Receiver) hookverify.Verifier {
			return &eitherVerifier{
				mkit:     &hookverify.MkitVerifier{Keys: list, Audience: r.URL, Namespaces: []string{"acme"}},
				standard: &hookverify.StandardVerifier{Secrets: []string{r.Secret}},
			}
		},
	})
	return rc
}

// wait waits until done holds, failing on a request that did not verify;
// what says what did not happen.
func (rc *receiver) wait(t *testing.T, done func() bool, what func() string) {
	t.Helper()
	relaytest.Eventually(t, settle, rc.notify, func() error {
		ok := done()
		if errs := rc.Rejections(); len(errs) > 0 {
			t.Fatalf("a webhook failed verification: %v", errs[0])
		}
		if !ok {
			return fmt.Errorf("%s within %s", what(), settle)
		}
		return nil
	})
}

// await waits until every (scheme, rid) of want has been delivered at least
// once, failing on a request that did not verify.
func (rc *receiver) await(t *testing.T, want map[string]bool) map[string]relaytest.Arrival {
	t.Helper()
	seen := map[string]relaytest.Arrival{}
	rc.wait(t, func() bool {
		for _, a := range rc.Arrivals() {
			key := a.Scheme + " " + a.RID
			if _, ok := seen[key]; !ok && want[key] && a.Status >= 200 && a.Status < 300 {
				seen[key] = a
			}
		}
		return len(seen) == len(want)
	}, func() string {
		var missing []string
		for key := range want {
			if _, ok := seen[key]; !ok {
				missing = append(missing, key)
			}
		}
		return fmt.Sprintf("not delivered: %v", missing)
	})
	return seen
}

func outcomesOfEveryKind(prefix string) []schema.Outcome {
	committed := outboxtest.Committed(prefix + "-committed")
	aborted := outboxtest.Aborted(prefix + "-aborted")
	expired := outboxtest.Committed(prefix + "-expired")
	expired.Committed, expired.Expired = nil, &schema.Expired{}
	read := outboxtest.Committed(prefix + "-read")
	read.Committed, read.ReadServed = nil, &schema.ReadServed{Object: outboxtest.HexA, BytesServed: 42}
	return []schema.Outcome{committed, aborted, expired, read}
}

// deliveryFlow registers one endpoint per signing scheme, posts outcomes of
// every kind (a list and a single one), and sees each delivered to both
// endpoints and verified.
func deliveryFlow(t *testing.T, p *relaytest.Relay, token string) {
	t.Helper()
	rc := startReceiver(t, p.URL)
	for id, body := range map[string]map[string]any{
		"mkit": {"url": rc.URL + "/mkit"},
		"std":  {"url": rc.URL + "/std", "scheme": "standard-webhooks", "secret": rc.Secret, "max_in_flight": 4},
	} {
		if code, v := p.Call(t, http.MethodPut, "/v1/namespaces/acme/endpoints/"+id, token, body); code != http.StatusCreated {
			t.Fatalf("put endpoint %s: %d %v", id, code, v)
		}
	}
	outcomes := outcomesOfEveryKind("e2e")
	code, v := p.Call(t, http.MethodPost, "/v1/namespaces/acme/outcomes", token, map[string]any{"outcomes": outcomes[:3]})
	if code != http.StatusAccepted {
		t.Fatalf("post a list: %d %v", code, v)
	}
	if code, v := p.Call(t, http.MethodPost, "/v1/namespaces/acme/outcomes", token, outcomes[3]); code != http.StatusAccepted {
		t.Fatalf("post one: %d %v", code, v)
	}
	want := map[string]bool{}
	for _, o := range outcomes {
		want["mkit-hook-v2 "+o.ReservationID] = true
		want["standard-webhooks "+o.ReservationID] = true
	}
	rc.await(t, want)

	// Replay: a row stuck behind a 10-minute Retry-After goes at once.
	stuckID := "stuck"
	rc.refuse.Store(&stuckID)
	stuck := outboxtest.Committed("stuck")
	if code, v := p.Call(t, http.MethodPost, "/v1/namespaces/acme/outcomes", token, stuck); code != http.StatusAccepted {
		t.Fatalf("post stuck: %d %v", code, v)
	}
	rc.wait(t, func() bool {
		for _, a := range rc.Arrivals() {
			if a.RID == "stuck" && a.Status == http.StatusServiceUnavailable {
				return true
			}
		}
		return false
	}, func() string { return "the stuck row was never tried" })
	// The failed attempt is recorded as its fire ends, just after the
	// answer: look until it shows.
	var view map[string]any
	relaytest.Eventually(t, settle, nil, func() error {
		_, view = p.Call(t, http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=mkit", token, nil)
		if rows, _ := view["rows"].([]any); len(rows) == 1 && rows[0].(map[string]any)["last_attempt"] != nil && view["state"] == "backing_off" {
			return nil
		}
		return fmt.Errorf("the failed attempt never showed: %v", view)
	})
	next, err := time.Parse(time.RFC3339, view["next_attempt_at"].(string))
	if err != nil || time.Until(next) < 5*time.Minute {
		t.Fatalf("the stuck row should wait out its Retry-After: next attempt %v (%v)", view["next_attempt_at"], err)
	}
	rc.refuse.Store(nil)
	replayed := time.Now()
	// A fire holding the stream this instant answers 409 stream-busy, which
	// asks to retry: a client does.
	busy := 0
	relaytest.Eventually(t, settle, nil, func() error {
		code, v := p.Call(t, http.MethodPost, "/v1/admin/namespaces/acme/endpoints/mkit/outcomes/stuck/replay", token, nil)
		if code == http.StatusAccepted {
			return nil
		}
		if code != http.StatusConflict || v["type"] != "urn:hookrelay:problem:stream-busy" {
			t.Fatalf("replay: %d %v", code, v)
		}
		busy++
		return fmt.Errorf("replay: the stream stayed busy: %v", v)
	})
	if busy > 0 {
		t.Logf("the replay found the stream busy %d times first", busy)
	}
	got := rc.await(t, map[string]bool{"mkit-hook-v2 stuck": true})
	t.Logf("replayed row delivered %s after the replay call", got["mkit-hook-v2 stuck"].At.Sub(replayed))
	if code, v := p.Call(t, http.MethodPost, "/v1/admin/namespaces/acme/endpoints/mkit/outcomes/nothing/replay", token, nil); code != http.StatusNotFound {
		t.Fatalf("replay of an unknown row: %d %v", code, v)
	}
}

func TestBinaryDeliversEveryKindWithTheEmbeddedStore(t *testing.T) {
	p, token := startRelay(t, []string{"RELAY_REDIS_URL="}, true)
	if strings.Contains(p.Log(), token) {
		t.Fatal("the development token was logged")
	}
	deliveryFlow(t, p, token)
	p.Stop()
}

func TestBinaryDeliversEveryKindOnRealRedis(t *testing.T) {
	p, creds := startOnRealRedis(t, "", "e2e")
	deliveryFlow(t, p, creds.Token)
	p.Stop()
}
