package httpapi_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// privateKeys are the whsk_ keys in Redis: what relay keeps and must never
// show.
func (h *harness) privateKeys(t *testing.T) []string {
	t.Helper()
	re := regexp.MustCompile(`whsk_[A-Za-z0-9+/]+=*`)
	var keys []string
	for _, v := range h.dump() {
		keys = append(keys, re.FindAllString(v, -1)...)
	}
	return keys
}

func TestV1aEndpointShowsItsPublicKeyAndNeverItsPrivateKey(t *testing.T) {
	h, logs := newLoggedHarness(t)
	tok := h.token("acme", httpapi.ScopeEndpointsWrite)
	path := "/v1/namespaces/acme/endpoints/billing"
	var answers []string
	do := func(method, path, body string, status int, slug httpapi.Slug) map[string]any {
		t.Helper()
		rec := h.do(method, path, tok, body)
		answers = append(answers, rec.Body.String())
		return want(t, rec, status, slug)
	}
	created := do(http.MethodPut, path, `{"url": "https://billing.example.com/hooks", "scheme": "standard-webhooks-v1a"}`, http.StatusCreated, "")
	pub, _ := created["public_key"].(string)
	if !strings.HasPrefix(pub, "whpk_") || created["scheme"] != "standard-webhooks-v1a" {
		t.Fatalf("created: %v", created)
	}
	if _, shown := created["secret"]; shown {
		t.Fatal("a v1a endpoint shows a secret")
	}
	keys := h.privateKeys(t)
	if len(keys) != 1 || schema.SigningKey(keys[0]).PublicKey() != pub {
		t.Fatalf("Redis holds %d private keys; want one, whose public key is shown", len(keys))
	}
	got := do(http.MethodGet, path, "", http.StatusOK, "")
	list := do(http.MethodGet, "/v1/namespaces/acme/endpoints", "", http.StatusOK, "")
	if got["public_key"] != pub || list["endpoints"].([]any)[0].(map[string]any)["public_key"] != pub {
		t.Fatalf("GET and list must show the public key: %v, %v", got, list)
	}
	kept := do(http.MethodPut, path, `{"url": "https://billing.example.com/v2", "scheme": "standard-webhooks-v1a"}`, http.StatusOK, "")
	if kept["public_key"] != pub {
		t.Fatal("a put without rotate_key changed the key")
	}
	rotated := do(http.MethodPut, path, `{"url": "https://billing.example.com/v2", "scheme": "standard-webhooks-v1a", "rotate_key": true}`, http.StatusOK, "")
	next, _ := rotated["public_key"].(string)
	if !strings.HasPrefix(next, "whpk_") || next == pub {
		t.Fatalf("rotation shows %q, was %q", next, pub)
	}
	if keys = h.privateKeys(t); len(keys) != 2 || schema.SigningKey(keys[0]).PublicKey() != next && schema.SigningKey(keys[1]).PublicKey() != next {
		t.Fatalf("after a rotation Redis holds %d private keys, want the new and the previous", len(keys))
	}

	// A client cannot give a key: relay generates them.
	before := h.dump()
	for name, body := range map[string]string{
		"private_key":         `"private_key": "` + keys[0] + `"`,
		"signing_keys":        `"signing_keys": ["` + keys[0] + `"]`,
		"public_key":          `"public_key": "` + pub + `"`,
		"a whsk_ as a secret": `"secret": "` + keys[0] + `"`,
	} {
		rec := h.do(http.MethodPut, path, tok, `{"url": "https://billing.example.com/v2", "scheme": "standard-webhooks-v1a", `+body+`}`)
		answers = append(answers, rec.Body.String())
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", name, rec.Code, rec.Body)
		}
	}
	for _, scheme := range []string{"standard-webhooks", "mkit-hook-v2"} {
		body := do(http.MethodPut, path, `{"url": "https://billing.example.com/v2", "scheme": "`+scheme+`", "rotate_key": true}`, http.StatusBadRequest, httpapi.SlugInvalidEndpoint)
		if detail, _ := body["detail"].(string); !strings.Contains(detail, "rotate_key") {
			t.Errorf("rotate_key with %s: detail %q does not name rotate_key", scheme, detail)
		}
	}
	if after := h.dump(); len(after) != len(before) || h.privateKeys(t)[0] != keys[0] {
		t.Fatal("a refused put changed the endpoint")
	}

	for _, k := range keys {
		raw := strings.TrimPrefix(k, "whsk_")
		for i, a := range answers {
			if strings.Contains(a, raw[:24]) {
				t.Fatalf("answer %d shows a private key", i)
			}
		}
		if strings.Contains(logs.String(), raw[:24]) {
			t.Fatal("a log line holds a private key")
		}
	}
	if !strings.Contains(logs.String(), "endpoint registered") {
		t.Fatal("the audit log is not captured: the log check proves nothing")
	}
}
