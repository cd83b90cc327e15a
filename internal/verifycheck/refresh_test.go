package verifycheck_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

// rotation is a receiver trusting relay's key relay-1, and relay's next
// key relay-2, not yet published.
type rotation struct {
	*bundle
	next *signing.MkitSigner
	keys *keysServer
}

func newRotation(t *testing.T) *rotation {
	t.Helper()
	r := &rotation{bundle: setup(t)}
	var err error
	if r.next, err = signing.NewMkitSigner("relay-2", seedKey(2)); err != nil {
		t.Fatal(err)
	}
	r.keys = newKeysServer(t, r.signer.PublicKey())
	return r
}

func (r *rotation) signNext(t *testing.T) http.Header {
	t.Helper()
	u := mustURL(endpoint)
	h, err := r.next.Sign(u, namespace, []byte(body), r.now)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestKeyListRefresherFollowsARotationAndKeepsTheNonces(t *testing.T) {
	t.Parallel()
	r := newRotation(t)
	refresher := &hookverify.KeyListRefresher{Verifier: r.v, URL: r.keys.keysURL()}
	old := r.sign(t, body)
	if err := r.v.Verify(old, "/in", []byte(body)); err != nil {
		t.Fatal(err)
	}
	next := r.signNext(t)
	if err := r.v.Verify(next, "/in", []byte(body)); !errors.Is(err, hookverify.ErrUnknownKey) {
		t.Fatalf("the next key before it is published: %v, want ErrUnknownKey", err)
	}

	r.keys.rotate(t, r.signer.PublicKey(), r.next.PublicKey())
	if err := refresher.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.v.Verify(next, "/in", []byte(body)); err != nil {
		t.Fatalf("the next key once published: %v", err)
	}
	if err := r.v.Verify(old, "/in", []byte(body)); !errors.Is(err, hookverify.ErrReplay) {
		t.Errorf("a request accepted before the refresh, again: %v, want ErrReplay", err)
	}

	r.keys.rotate(t, r.next.PublicKey())
	if err := refresher.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.v.Verify(r.sign(t, body), "/in", []byte(body)); !errors.Is(err, hookverify.ErrUnknownKey) {
		t.Errorf("the retired key: %v, want ErrUnknownKey", err)
	}
	if got := r.v.CurrentKeys(); len(got.Keys) != 1 || got.Keys[0].KeyID != "relay-2" {
		t.Errorf("current keys %+v", got)
	}
}

func TestKeyListRefresherKeepsTheKeysWhenAFetchFails(t *testing.T) {
	t.Parallel()
	r := newRotation(t)
	for name, h := range map[string]http.HandlerFunc{
		"an error status": func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusBadGateway) },
		"an empty list":   func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"version":1,"keys":[]}`)) },
		"a broken list":   func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"version":1,`)) },
	} {
		srv := answering(t, h)
		refresher := &hookverify.KeyListRefresher{Verifier: r.v, URL: srv.URL}
		if err := refresher.Refresh(context.Background()); err == nil {
			t.Errorf("%s: refreshed", name)
		}
		if err := r.v.Verify(r.sign(t, body), "/in", []byte(body)); err != nil {
			t.Errorf("%s: the key list was lost: %v", name, err)
		}
	}
}

func TestKeyListRefresherRunRefreshesOnEachTickAndReportsFailures(t *testing.T) {
	t.Parallel()
	r := newRotation(t)
	ticks := make(chan time.Time) // unbuffered: a tick is taken only once the previous refresh is done
	var failures atomic.Int64     // OnError may run while the test reads
	refresher := &hookverify.KeyListRefresher{Verifier: r.v, URL: r.keys.keysURL(), Ticks: ticks, OnError: func(err error) {
		if err != nil {
			failures.Add(1)
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- refresher.Run(ctx) }()

	r.keys.rotate(t, r.signer.PublicKey(), r.next.PublicKey())
	ticks <- r.now
	ticks <- r.now // the first refresh is done
	if err := r.v.Verify(r.signNext(t), "/in", []byte(body)); err != nil {
		t.Fatalf("after a tick: %v", err)
	}
	if n := r.keys.count.Load(); n < 1 {
		t.Fatalf("%d fetches", n)
	}

	r.keys.Close()
	ticks <- r.now
	ticks <- r.now // the failed refresh is done
	if failures.Load() == 0 {
		t.Error("a failed refresh was not reported")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
	if err := r.v.Verify(r.signNext(t), "/in", []byte(body)); err != nil {
		t.Errorf("keys after a failed refresh: %v, want them kept", err)
	}
}

func TestKeyListRefresherRunRefusesAnUntrustedURL(t *testing.T) {
	t.Parallel()
	r := newRotation(t)
	refresher := &hookverify.KeyListRefresher{Verifier: r.v, URL: "http://relay.example.com/keys.json", Ticks: make(chan time.Time)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // so that Run, should it take the URL, returns at once
	if err := refresher.Run(ctx); !errors.Is(err, hookverify.ErrKeyListSource) {
		t.Errorf("got %v, want ErrKeyListSource", err)
	}
}

// Requests verify while the keys are swapped under them (run with -race).
func TestSetKeysIsSafeWhileVerifying(t *testing.T) {
	t.Parallel()
	r := newRotation(t)
	both := keyList(t, r.signer.PublicKey(), r.next.PublicKey())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				u := mustURL(endpoint)
				h, err := r.signer.Sign(u, namespace, []byte(body), r.now)
				if err != nil {
					t.Error(err)
					return
				}
				if err := r.v.Verify(h, "/in", []byte(body)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 50 {
		r.v.SetKeys(both)
	}
	wg.Wait()
}
