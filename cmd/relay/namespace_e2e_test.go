package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/relaytest"
)

// Two tenants of one relay register the same receiver URL. The receiver
// takes only victim-b's webhooks: attacker-a's, though relay signs them with
// the same key, are refused for their namespace, so the attacker cannot
// pass its outcomes off as the victim's, nor claim the victim's reservation
// id first and have the real outcome dropped as a duplicate.
func TestBinaryReceiverRefusesAnotherNamespacesWebhooks(t *testing.T) {
	secret := strings.Repeat("k", 32)
	p, _ := startRelay(t, []string{
		"RELAY_REDIS_URL=",
		"RELAY_JWT_SECRET=" + secret,
		"RELAY_PUBLIC_URL=http://relay.test",
	}, false)
	token := func(ns string) string {
		tok, err := httpapi.MintHS256([]byte(secret), "http://relay.test", "", httpapi.Principal{
			Subject: ns, Namespace: ns,
			Scopes: []httpapi.Scope{httpapi.ScopeOutcomesWrite, httpapi.ScopeEndpointsWrite, httpapi.ScopeOutboxRead},
		}, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	victim, attacker := token("victim-b"), token("attacker-a")

	rp := relaytest.StartReceive(t, "-keys", p.URL+"/.well-known/mkit-hook-keys.json", "-namespace", "victim-b")
	hook := map[string]any{"url": rp.URL + "/hooks/victim"}
	if code, v := p.Call(t, http.MethodPut, "/v1/namespaces/victim-b/endpoints/hooks", victim, hook); code != http.StatusCreated || v["scheme"] != "mkit-hook-v2" {
		t.Fatalf("victim's endpoint: %d %v, want 201 with scheme mkit-hook-v2", code, v)
	}
	// The attacker's token is bound to its own namespace...
	if code, _ := p.Call(t, http.MethodPut, "/v1/namespaces/victim-b/endpoints/evil", attacker, hook); code != http.StatusForbidden {
		t.Fatalf("attacker's token on the victim's namespace: %d, want 403", code)
	}
	// ...but nothing stops it registering the victim's URL there.
	if code, v := p.Call(t, http.MethodPut, "/v1/namespaces/attacker-a/endpoints/hooks", attacker, hook); code != http.StatusCreated {
		t.Fatalf("attacker's endpoint: %d %v", code, v)
	}

	// The attacker goes first, with the reservation id the victim will use.
	forged := outboxtest.Aborted("r-claimed")
	if code, v := p.Call(t, http.MethodPost, "/v1/namespaces/attacker-a/outcomes", attacker, forged); code != http.StatusAccepted {
		t.Fatalf("attacker's outcome: %d %v", code, v)
	}
	line := rp.Next(t)
	if !strings.HasPrefix(line, `REJECTED mkit-hook-v2 "/hooks/victim": hookverify: namespace not accepted`) {
		t.Fatalf("the attacker's webhook reached the victim's receiver as: %s", line)
	}
	// relay took the refusal as a failed attempt: the row waits, undelivered.
	_, view := p.Call(t, http.MethodGet, "/v1/namespaces/attacker-a/outbox?endpoint=hooks", attacker, nil)
	if rows, _ := view["rows"].([]any); len(rows) != 1 || rows[0].(map[string]any)["reservation_id"] != "r-claimed" {
		t.Fatalf("the attacker's outbox: %v, want its one row pending", view)
	}

	real := outboxtest.Committed("r-claimed")
	if code, v := p.Call(t, http.MethodPost, "/v1/namespaces/victim-b/outcomes", victim, real); code != http.StatusAccepted {
		t.Fatalf("victim's outcome: %d %v", code, v)
	}
	want := `verified mkit-hook-v2 "/hooks/victim" "outcome.committed" namespace="victim-b" reservation_id="r-claimed"`
	for {
		l := rp.Next(t)
		if l == want {
			break
		}
		// The attacker's row is retried meanwhile, and refused each time.
		if !strings.HasPrefix(l, `REJECTED mkit-hook-v2 "/hooks/victim": hookverify: namespace not accepted`) {
			t.Fatalf("receiver printed %s, want %s", l, want)
		}
	}
}

// One token that may write endpoints in any namespace creates namespaces
// only up to RELAY_MAX_NAMESPACES: the first endpoint of one more is 422
// too-many-namespaces, while the namespaces held take endpoints as before.
func TestBinaryStopsNewNamespacesAtTheLimit(t *testing.T) {
	secret := strings.Repeat("k", 32)
	p, _ := startRelay(t, []string{
		"RELAY_REDIS_URL=",
		"RELAY_JWT_SECRET=" + secret,
		"RELAY_PUBLIC_URL=http://relay.test",
		"RELAY_MAX_NAMESPACES=2",
	}, false)
	tok, err := httpapi.MintHS256([]byte(secret), "http://relay.test", "", httpapi.Principal{
		Subject: "any", Scopes: []httpapi.Scope{httpapi.ScopeEndpointsWrite},
	}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hook := map[string]any{"url": "https://hooks.example.com/relay"}
	for _, ns := range []string{"ns-0", "ns-1"} {
		if code, v := p.Call(t, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/hooks", tok, hook); code != http.StatusCreated {
			t.Fatalf("%s: %d %v", ns, code, v)
		}
	}
	code, v := p.Call(t, http.MethodPut, "/v1/namespaces/ns-2/endpoints/hooks", tok, hook)
	if code != http.StatusUnprocessableEntity || v["type"] != httpapi.SlugTooManyNamespaces.Type() || !strings.Contains(fmt.Sprint(v["detail"]), "at most 2 namespaces") {
		t.Fatalf("a third namespace: %d %v, want 422 too-many-namespaces naming the limit", code, v)
	}
	if code, v := p.Call(t, http.MethodPut, "/v1/namespaces/ns-0/endpoints/audit", tok, hook); code != http.StatusCreated {
		t.Fatalf("a second endpoint of a namespace held: %d %v", code, v)
	}
}
