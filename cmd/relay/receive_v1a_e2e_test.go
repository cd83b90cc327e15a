package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/relaytest"
)

// The public_key relay shows for a standard-webhooks-v1a endpoint is all
// `relay receive` needs to verify what relay delivers to it.
func TestBinaryReceiverVerifiesV1aWithTheEndpointsPublicKey(t *testing.T) {
	p, token := startRelay(t, []string{"RELAY_REDIS_URL="}, true)
	const path = "/v1/namespaces/acme/endpoints/hooks"
	// Registered disabled first: the receiver's URL needs the key, and the
	// key the endpoint.
	v := p.Must(t, http.StatusCreated, http.MethodPut, path, token, map[string]any{"url": "http://127.0.0.1:9/hooks", "scheme": "standard-webhooks-v1a", "enabled": false})
	public, _ := v["public_key"].(string)
	if !strings.HasPrefix(public, "whpk_") {
		t.Fatalf("endpoint %v has no whpk_ public_key", v)
	}
	rp := relaytest.StartReceive(t, "-public-key", public)
	v = p.Must(t, http.StatusOK, http.MethodPut, path, token, map[string]any{"url": rp.URL + "/hooks", "scheme": "standard-webhooks-v1a"})
	if v["public_key"] != public {
		t.Fatalf("the update changed the public key: %v", v)
	}
	if code, v := p.Call(t, http.MethodPost, "/v1/namespaces/acme/outcomes", token, outboxtest.Committed("r-v1a")); code != http.StatusAccepted {
		t.Fatalf("outcome: %d %v", code, v)
	}
	want := `verified standard-webhooks-v1a "/hooks" "outcome.committed" namespace="acme" reservation_id="r-v1a"`
	if l := rp.Next(t); l != want {
		t.Fatalf("the receiver printed %q, want %q", l, want)
	}
}
