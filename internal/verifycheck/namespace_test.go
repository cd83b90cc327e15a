package verifycheck_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hookrelay/relay/hookverify"
)

// One relay key signs every tenant's webhooks: a request relay signed, for
// this receiver's URL and audience, but for another namespace, is refused.
func TestMkitRefusesAnotherNamespacesWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	forged := bodyOf("attacker-a", "r-1")
	check(t, b.v, b.signFor(t, "attacker-a", forged), "/in", forged, hookverify.ErrNamespace)

	// A receiver of several namespaces takes each of them, and no other.
	b.v.Namespaces = []string{"attacker-a", namespace}
	if err := b.v.Verify(b.signFor(t, "attacker-a", forged), "/in", []byte(forged)); err != nil {
		t.Errorf("a namespace the receiver names: %v", err)
	}
	if err := b.v.Verify(b.sign(t, body), "/in", []byte(body)); err != nil {
		t.Errorf("the other namespace it names: %v", err)
	}
	other := bodyOf("victim-c", "r-1")
	check(t, b.v, b.signFor(t, "victim-c", other), "/in", other, hookverify.ErrNamespace)
}

// Naming no namespace refuses everything; only AcceptAnyNamespace, set on
// purpose, takes every one.
func TestMkitNamingNoNamespaceRefusesEveryRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.v.Namespaces = nil
	check(t, b.v, b.sign(t, body), "/in", body, hookverify.ErrConfig)

	b.v.AcceptAnyNamespace = true
	for _, ns := range []string{namespace, "attacker-a"} {
		if err := b.v.Verify(b.signFor(t, ns, bodyOf(ns, "r-1")), "/in", []byte(bodyOf(ns, "r-1"))); err != nil {
			t.Errorf("any namespace, %s: %v", ns, err)
		}
	}
	b.v.Namespaces = []string{namespace}
	check(t, b.v, b.sign(t, body), "/in", body, hookverify.ErrConfig) // both set: ambiguous
}

func TestMkitRefusesAlteredNamespaceHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Signed for the attacker, relabelled as the victim's: the namespace is
	// signed.
	forged := bodyOf("attacker-a", "r-1")
	h := b.signFor(t, "attacker-a", forged)
	h.Set("X-Mkit-Hook-Namespace", namespace)
	check(t, b.v, h, "/in", forged, hookverify.ErrBadSignature)
	// The victim's body too, as if the attacker had its own signed: the
	// digest gives it away.
	check(t, b.v, h, "/in", body, hookverify.ErrDigest)

	for name, mutate := range map[string]func(h http.Header){
		"removed":         func(h http.Header) { h.Del("X-Mkit-Hook-Namespace") },
		"emptied":         func(h http.Header) { h.Set("X-Mkit-Hook-Namespace", "") },
		"duplicated":      func(h http.Header) { h.Add("X-Mkit-Hook-Namespace", namespace) },
		"another added":   func(h http.Header) { h.Add("X-Mkit-Hook-Namespace", "attacker-a") },
		"another first":   func(h http.Header) { h["X-Mkit-Hook-Namespace"] = []string{"attacker-a", namespace} },
		"upper case":      func(h http.Header) { h.Set("X-Mkit-Hook-Namespace", "ACME") },
		"mixed case":      func(h http.Header) { h.Set("X-Mkit-Hook-Namespace", "Acme") },
		"padded":          func(h http.Header) { h.Set("X-Mkit-Hook-Namespace", " acme") },
		"comma list":      func(h http.Header) { h.Set("X-Mkit-Hook-Namespace", "acme,attacker-a") },
		"second spelling": func(h http.Header) { h["x-mkit-hook-namespace"] = []string{"attacker-a"} },
		"only another spelled": func(h http.Header) {
			h["x-mkit-hook-namespace"] = h["X-Mkit-Hook-Namespace"]
			h.Del("X-Mkit-Hook-Namespace")
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := b.sign(t, body)
			mutate(h)
			err := b.v.Verify(h, "/in", []byte(body))
			if !errors.Is(err, hookverify.ErrMalformed) && !errors.Is(err, hookverify.ErrMissingHeader) {
				t.Errorf("got %v, want ErrMalformed or ErrMissingHeader", err)
			}
		})
	}
	// The genuine request still verifies: none of the refusals above burnt
	// its nonce.
	h = b.sign(t, body)
	for range 2 {
		bad := h.Clone()
		bad.Set("X-Mkit-Hook-Namespace", "attacker-a")
		check(t, b.v, bad, "/in", body, hookverify.ErrNamespace)
	}
	if err := b.v.Verify(h, "/in", []byte(body)); err != nil {
		t.Errorf("genuine request after refusals of its relabelled copies: %v", err)
	}
}

// Over a real connection, header names arrive in any case and net/http
// joins them: one namespace in another case is that header; two are
// refused.
func TestMkitNamespaceHeaderOverTheWire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(hookverify.Middleware(b.v, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))
	t.Cleanup(srv.Close)
	post := func(h http.Header, body string) int {
		t.Helper()
		r, err := http.NewRequest(http.MethodPost, srv.URL+"/in", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header = h // written as spelled: Go's client does not canonicalise
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	h := b.sign(t, body)
	h["x-mkit-hook-namespace"] = h["X-Mkit-Hook-Namespace"]
	delete(h, "X-Mkit-Hook-Namespace")
	if code := post(h, body); code != http.StatusNoContent {
		t.Errorf("namespace header sent in lower case: %d, want 204", code)
	}
	h = b.sign(t, body)
	h["x-mkit-hook-namespace"] = []string{"attacker-a"}
	if code := post(h, body); code != http.StatusUnauthorized {
		t.Errorf("namespace header twice, in two spellings: %d, want 401", code)
	}
}

// The body's data.namespace is what a handler reads: it must be the signed
// namespace, spelled once and exactly so. The requests are forged with
// relay's key, as if relay had signed an inconsistent body.
func TestMkitRefusesBodyNamespaceOtherThanSigned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, body := range map[string]string{
		"other namespace":            bodyOf("attacker-a", "r-1"),
		"no namespace":               `{"type":"outcome.expired","data":{"reservation_id":"r-1"}}`,
		"no data":                    `{"type":"outcome.expired","namespace":"acme"}`,
		"null namespace":             `{"data":{"namespace":null}}`,
		"number namespace":           `{"data":{"namespace":1}}`,
		"empty namespace":            `{"data":{"namespace":""}}`,
		"data not an object":         `{"data":"acme"}`,
		"an array":                   `[{"data":{"namespace":"acme"}}]`,
		"not JSON":                   `acme`,
		"empty":                      ``,
		"trailing data":              `{"data":{"namespace":"acme"}}{}`,
		"truncated":                  `{"data":{"namespace":"acme"}`,
		"namespace twice":            `{"data":{"namespace":"acme","namespace":"attacker-a"}}`,
		"namespace twice, ours last": `{"data":{"namespace":"attacker-a","namespace":"acme"}}`,
		"other case first":           `{"data":{"Namespace":"attacker-a","namespace":"acme"}}`,
		"other case only":            `{"data":{"NAMESPACE":"acme"}}`,
		"data twice":                 `{"data":{"namespace":"acme"},"data":{"namespace":"attacker-a"}}`,
		"data in other case":         `{"Data":{"namespace":"attacker-a"},"data":{"namespace":"acme"}}`,
		"namespace one level up":     `{"namespace":"acme","data":{"namespace":"attacker-a"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			// Each case its own verifier (and nonce cache): the nonce check
			// below is about this refusal alone.
			v := &hookverify.MkitVerifier{Keys: b.v.Keys, Audience: audience, Namespaces: b.v.Namespaces, Now: b.v.Now}
			check(t, v, forge(b.key, b.fields(body)), "/in", body, hookverify.ErrNamespace)
			// Refused before the nonce is recorded: the same nonce with
			// a consistent body still verifies.
			f := b.fields(bodyOf(namespace, "r-1"))
			if err := v.Verify(forge(b.key, f), "/in", []byte(bodyOf(namespace, "r-1"))); err != nil {
				t.Errorf("consistent body after the refusal: %v", err)
			}
		})
	}
	// Escapes, other members and nesting do not matter, only the value.
	for _, body := range []string{
		`{"data":{"namespace":"\u0061cme"}}`,
		`{"type":"x","data":{"reservation_id":"r-1","refs":[{"namespace":"other"}],"namespace":"acme","z":{"data":{}}}}`,
		` {"data" : {"namespace" : "acme"}} ` + "\n",
	} {
		f := b.fields(body)
		f.nonce = strings.Repeat("6b", 32)
		b.v.Nonces = hookverify.NewNonceCache(0, b.v.Now)
		if err := b.v.Verify(forge(b.key, f), "/in", []byte(body)); err != nil {
			t.Errorf("body %s: %v", body, err)
		}
	}
}

// A receiver that deduplicates by reservation id (as relay's at-least-once
// delivery asks) keeps the victim's real outcome when another tenant sent
// one under the same reservation id first: that one never reaches the
// handler.
func TestAnotherNamespaceCannotClaimAReservationIDFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var (
		mu      sync.Mutex
		seen    = map[string]bool{}
		handled []string
	)
	h := hookverify.Middleware(b.v, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var event struct {
			Data struct {
				ReservationID string `json:"reservation_id"`
				Namespace     string `json:"namespace"`
			} `json:"data"`
		}
		if err := json.Unmarshal(raw, &event); err != nil {
			t.Errorf("handler: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[event.Data.ReservationID] {
			w.WriteHeader(http.StatusOK) // a duplicate: acknowledged, dropped
			return
		}
		seen[event.Data.ReservationID] = true
		handled = append(handled, event.Data.Namespace+"/"+event.Data.ReservationID)
		w.WriteHeader(http.StatusOK)
	}))
	attacker := bodyOf("attacker-a", "r-claimed")
	if rec := serve(h, b.signFor(t, "attacker-a", attacker), "/in", attacker); rec.Code != http.StatusUnauthorized {
		t.Fatalf("the attacker's webhook: %d %s, want 401", rec.Code, rec.Body)
	}
	victim := bodyOf(namespace, "r-claimed")
	if rec := serve(h, b.sign(t, victim), "/in", victim); rec.Code != http.StatusOK {
		t.Fatalf("the victim's webhook: %d %s", rec.Code, rec.Body)
	}
	if len(handled) != 1 || handled[0] != "acme/r-claimed" {
		t.Errorf("handled %v, want the victim's outcome alone", handled)
	}
}
