package httpapi_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/hookrelay/relay/internal/httpapi"
)

// signedHS256 signs raw header and claims JSON, for shapes MapClaims cannot
// produce (null members, duplicate keys).
func signedHS256(t *testing.T, header, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	s := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	sig, err := jwt.SigningMethodHS256.Sign(s, secret)
	if err != nil {
		t.Fatal(err)
	}
	return s + "." + enc.EncodeToString(sig)
}

// An ns claim of null must not make a token unbound: fail closed.
func TestNullNamespaceClaimIsRefused(t *testing.T) {
	a := authFor(t, nil)
	mustRefuse(t, a, signedHS256(t, `{"alg":"HS256","typ":"JWT"}`,
		`{"sub":"x","aud":"`+audience+`","exp":1700003600,"scope":"admin","ns":null}`))
	mustRefuse(t, a, signedHS256(t, `{"alg":"HS256","typ":"JWT"}`,
		`{"sub":"x","aud":"`+audience+`","exp":1700003600,"scope":"admin","ns":"acme","ns":null}`))
}

// nbf and iat beyond int64 seconds wrap to the far past in the library.
func TestOverflowingNbfAndIatAreRefused(t *testing.T) {
	a := authFor(t, nil)
	mustRefuse(t, a, hs(t, map[string]any{"nbf": 1e300}))
	mustRefuse(t, a, hs(t, map[string]any{"nbf": 1e19}))
	mustRefuse(t, a, hs(t, map[string]any{"iat": 1e300}))
}

// RFC 6749 §3.3: scope tokens are separated by %x20 only.
func TestScopeIsSplitOnSpacesOnly(t *testing.T) {
	a := authFor(t, nil)
	p := mustAccept(t, a, hs(t, map[string]any{"scope": "outcomes:write\u00a0admin outbox:read\u0085admin"}))
	if !reflect.DeepEqual(p.Scopes, []httpapi.Scope{}) && !reflect.DeepEqual(p.Scopes, []httpapi.Scope(nil)) {
		t.Fatalf("scopes %v: no-break space and NEL are not separators", p.Scopes)
	}
}

// encoding/json matches keys case-insensitively, so keys the strict check
// calls distinct land on one field: the last wins.
func TestCaseVariantKeysAreRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		before := h.dump()
		for _, body := range []string{
			`{"reservation_id": "c1", "RESERVATION_ID": "c2", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000, "expired": {}}`,
			`{"OUTCOMES": [` + outcomeJSON("c3", "expired") + `]}`,
			`{"reservation_id": "c4", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000, "\u212Aexpired": {}, "expired": {}}`,
		} {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), body), http.StatusBadRequest, httpapi.SlugInvalidRequest)
		}
		if after := h.dump(); !reflect.DeepEqual(before, after) {
			t.Fatal("a refused request wrote")
		}
	})
}

// No request member is nullable in the contract; null must not pass as
// "absent".
func TestNullMembersAreRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		before := h.dump()
		one := strings.TrimSuffix(outcomeJSON("n1", "expired"), "}")
		for _, body := range []string{
			`{"outcomes": null}`,
			one + `, "outcomes": null}`,
			one + `, "aborted": null}`,
			`{"reservation_id": "n2", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000, "committed": {"bytes_stored": 1, "new_to_repo": 1, "new_to_store": 1, "refs": null}}`,
		} {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), body), http.StatusBadRequest, httpapi.SlugInvalidRequest)
		}
		want(t, h.do(http.MethodPut, "/v1/namespaces/acme/endpoints/billing", h.admin(),
			`{"url": "https://billing.example.com/hooks", "enabled": null, "max_in_flight": null}`), http.StatusBadRequest, httpapi.SlugInvalidRequest)
		if after := h.dump(); !reflect.DeepEqual(before, after) {
			t.Fatal("a refused request wrote")
		}
	})
}

// A list holds only "outcomes"; zero-valued single-outcome members are
// members all the same.
func TestListWithOutcomeMembersIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		before := h.dump()
		for _, extra := range []string{`"reservation_id": ""`, `"occurred_unix_ms": 0`, `"repository": ""`} {
			body := `{"outcomes": [` + outcomeJSON("z1", "expired") + `], ` + extra + `}`
			got := want(t, h.do(http.MethodPost, outcomesPath, h.admin(), body), http.StatusBadRequest, httpapi.SlugInvalidRequest)
			if got["detail"] != `a list holds only "outcomes"` {
				t.Errorf("%s: detail %q", extra, got["detail"])
			}
		}
		if after := h.dump(); !reflect.DeepEqual(before, after) {
			t.Fatal("a refused request wrote")
		}
	})
}

// force is a boolean query parameter: "true" or "false", not strconv's
// 1/t/T/TRUE/True, on the one flag that drops data.
func TestForceIsTrueOrFalse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("f1", "expired")), http.StatusAccepted, "")
		for _, q := range []string{"1", "t", "T", "TRUE", "True"} {
			want(t, h.do(http.MethodDelete, "/v1/namespaces/acme/endpoints/billing?force="+q, h.admin(), ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
		}
		want(t, h.do(http.MethodDelete, "/v1/namespaces/acme/endpoints/billing?force=true", h.admin(), ""), http.StatusOK, "")
	})
}

// RFC 9110 §15.5.6: a 405 carries Allow.
func Test405CarriesAllow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		rec := h.do(http.MethodPatch, "/v1/namespaces/acme/endpoints/billing", h.admin(), "")
		want(t, rec, http.StatusMethodNotAllowed, httpapi.SlugMethodNotAllowed)
		if got := rec.Header().Get("Allow"); got != "GET, PUT, DELETE" {
			t.Fatalf("Allow %q", got)
		}
		rec = h.do(http.MethodPost, "/healthz", "", "")
		if got := rec.Header().Get("Allow"); got != "GET" {
			t.Fatalf("Allow %q", got)
		}
	})
}

// Rows under "s:" ids are acknowledged without a call: a producer's outcome
// under one would be answered accepted and never sent. Ingest and replay
// refuse the prefix, naming the field; other ids holding "s:" pass.
func TestSyntheticReservationIDsAreRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		before := h.dump()
		const named = `reservation_id must not start with "s:"`
		body := want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("s:local", "expired")), http.StatusBadRequest, httpapi.SlugInvalidOutcome)
		if d, _ := body["detail"].(string); !strings.HasPrefix(d, named) {
			t.Fatalf("detail %q", d)
		}
		list := `{"outcomes": [` + outcomeJSON("b-1", "expired") + `,` + outcomeJSON("s:", "expired") + `]}`
		body = want(t, h.do(http.MethodPost, outcomesPath, h.admin(), list), http.StatusBadRequest, httpapi.SlugInvalidOutcome)
		errs, _ := body["errors"].([]any)
		if len(errs) != 1 {
			t.Fatalf("errors %v", body["errors"])
		}
		if e := errs[0].(map[string]any); e["index"] != 1.0 || !strings.HasPrefix(e["detail"].(string), named) {
			t.Fatalf("error %v", e)
		}
		body = want(t, h.do(http.MethodPost, "/v1/admin/namespaces/acme/endpoints/billing/outcomes/s:local/replay", h.admin(), ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
		if d, _ := body["detail"].(string); !strings.HasPrefix(d, named) {
			t.Fatalf("replay detail %q", d)
		}
		if after := h.dump(); !reflect.DeepEqual(before, after) {
			t.Fatal("a refused request wrote")
		}
		for _, rid := range []string{"s", "S:x", "xs:1", "r-s:"} {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON(rid, "expired")), http.StatusAccepted, "")
		}
	})
}

// badUnicode are strings encoding/json would read as U+FFFD, each written
// as it goes between the quotes of a JSON string.
var badUnicode = map[string]string{
	"raw 0xFF":            "\xff",
	"overlong C0 AF":      "\xc0\xaf",
	"lone surrogate":      `\ud800`,
	"lone low surrogate":  `\udc00`,
	"reversed surrogates": `\udc00\ud800`,
	"CESU-8":              "\xed\xa0\xbd\xed\xb2\xa9",
	"encoded surrogate":   "\xed\xa0\x80",
}

// Invalid UTF-8 and unpaired surrogate escapes would be rewritten to
// U+FFFD, so that different bodies became one outcome: every string field
// of an outcome or an endpoint refuses them, naming the field.
func TestInvalidUnicodeIsRefusedNamingTheField(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	wrap := func(rid, kind string) string {
		return `{"reservation_id": "` + rid + `", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000, ` + kind + `}`
	}
	// Each template holds X where the bad string goes.
	outcomes := []struct{ field, body string }{
		{"reservation_id", wrap("r-X", `"expired": {}`)},
		{"repository", strings.Replace(wrap("o-1", `"expired": {}`), "acme/widgets", "acme/X", 1)},
		{"committed.refs[0].name", wrap("o-2", `"committed": {"refs": [{"name": "refs/heads/X", "new": "`+hex+`"}]}`)},
		{"committed.refs[1].new", wrap("o-3", `"committed": {"refs": [{"name": "a", "new": "`+hex+`"}, {"name": "b", "new": "X"}]}`)},
		{"aborted.reason", wrap("o-4", `"aborted": {"reason": "X"}`)},
		{"aborted.detail", wrap("o-5", `"aborted": {"reason": "x", "detail": "main X moved"}`)},
		{"read_served.object", wrap("o-6", `"read_served": {"object": "X", "bytes_served": 1}`)},
		{"outcomes[1].repository", `{"outcomes": [` + wrap("o-7", `"expired": {}`) + `, ` + strings.Replace(wrap("r-2", `"expired": {}`), "acme/widgets", "X", 1) + `]}`},
	}
	endpoints := []struct{ field, body string }{
		{"url", `{"url": "https://billing.example.com/X"}`},
		{"scheme", `{"url": "https://billing.example.com/hooks", "scheme": "X"}`},
		{"kinds[1]", `{"url": "https://billing.example.com/hooks", "kinds": ["committed", "X"]}`},
		{"secret", `{"url": "https://billing.example.com/hooks", "scheme": "standard-webhooks", "secret": "whsec_X"}`},
	}
	// valid is body with a string in X that its field takes.
	valid := func(field, body string) string {
		fill := "z"
		switch {
		case strings.HasSuffix(field, "object"), strings.HasSuffix(field, "new"):
			fill = hex
		case field == "scheme":
			fill = "mkit-hook-v2"
		case field == "kinds[1]":
			fill = "aborted"
		case field == "secret":
			fill = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		}
		return strings.Replace(body, "X", fill, 1)
	}
	type request struct{ method, path, field, body string }
	var requests []request
	for _, c := range outcomes {
		requests = append(requests, request{http.MethodPost, outcomesPath, c.field, c.body})
	}
	for _, c := range endpoints {
		requests = append(requests, request{http.MethodPut, "/v1/namespaces/acme/endpoints/x", c.field, c.body})
	}
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		before := h.dump()
		for _, r := range requests {
			for name, bad := range badUnicode {
				got := want(t, h.do(r.method, r.path, h.admin(), strings.Replace(r.body, "X", bad, 1)), http.StatusBadRequest, httpapi.SlugInvalidRequest)
				if d := got["detail"]; d != r.field+" must be valid UTF-8 with no unpaired surrogate escape" {
					t.Errorf("%s in %s: detail %q", name, r.field, d)
				}
			}
		}
		if after := h.dump(); !reflect.DeepEqual(before, after) {
			t.Fatal("a refused request wrote")
		}
		// Each body with a valid string in place is taken: the refusals
		// were the strings' doing.
		for _, r := range requests {
			if rec := h.do(r.method, r.path, h.admin(), valid(r.field, r.body)); rec.Code >= 300 {
				t.Errorf("%s: the body with a valid string is refused too: %d %s", r.field, rec.Code, rec.Body)
			}
		}
	})
}

// occurred_unix_ms in the wrong unit came out as a webhook timestamp of
// year 57883: ingest takes times up to 5 minutes past its clock, edges
// exact, and any time before it.
func TestOccurredTimeIsBoundedAheadOfTheClock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		at := func(rid string, ms int64) string {
			return strings.Replace(outcomeJSON(rid, "expired"), "1764460800000", strconv.FormatInt(ms, 10), 1)
		}
		now := h.clk.Now().UnixMilli()
		last := now + 5*60*1000
		before := h.dump()
		for name, ms := range map[string]int64{
			"the first refused": last + 1,
			"microseconds":      now * 1000,
			"nanoseconds":       now * 1_000_000,
			"year 10000":        253402300800000,
		} {
			body := want(t, h.do(http.MethodPost, outcomesPath, h.admin(), at("t-"+strings.ReplaceAll(name, " ", "-"), ms)), http.StatusBadRequest, httpapi.SlugInvalidOutcome)
			if d, _ := body["detail"].(string); !strings.HasPrefix(d, "occurred_unix_ms must be Unix time in milliseconds, no later than 5 minutes past relay's clock") {
				t.Errorf("%s: detail %q", name, d)
			}
		}
		list := `{"outcomes": [` + at("b-1", now) + `,` + at("b-2", last+1) + `]}`
		body := want(t, h.do(http.MethodPost, outcomesPath, h.admin(), list), http.StatusBadRequest, httpapi.SlugInvalidOutcome)
		if errs, _ := body["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["index"] != 1.0 {
			t.Fatalf("errors %v", body["errors"])
		}
		if after := h.dump(); !reflect.DeepEqual(before, after) {
			t.Fatal("a refused request wrote")
		}
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), at("t-last", last)), http.StatusAccepted, "")
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), at("t-old", 1)), http.StatusAccepted, "")
		// The bound moves with the clock.
		h.clk.Advance(time.Millisecond)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), at("t-next", last+1)), http.StatusAccepted, "")
	})
}

// signedEdDSA signs raw header and claims JSON with an Ed25519 key.
func signedEdDSA(t *testing.T, key ed25519.PrivateKey, header, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	s := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	sig, err := jwt.SigningMethodEdDSA.Sign(s, key)
	if err != nil {
		t.Fatal(err)
	}
	return s + "." + enc.EncodeToString(sig)
}

// Claim sets for forged tokens: the valid claims of an outbox:read token,
// with extra members after them.
const (
	hsHeader   = `{"alg":"HS256","typ":"JWT"}`
	baseClaims = `{"sub":"ci-bot","aud":"` + audience + `","iat":1699999940,"exp":1700003600,"scope":"outbox:read"`
)

func withClaims(extra string) string { return baseClaims + extra + "}" }

// forgedTokens are tokens signed with the right key whose claims or header
// a loose reader would take for more than was meant: admin, another
// namespace, a later expiry. Each must be refused.
var forgedClaims = map[string]string{
	"duplicate scope":                   withClaims(`,"scope":"admin"`),
	"duplicate scope, escaped":          withClaims(`,"\u0073cope":"admin"`),
	"duplicate ns":                      withClaims(`,"ns":"acme","ns":"other"`),
	"duplicate exp":                     `{"sub":"ci-bot","aud":"` + audience + `","exp":1699990000,"exp":1700003600,"scope":"admin"}`,
	"duplicate sub":                     withClaims(`,"sub":"root"`),
	"duplicate aud":                     withClaims(`,"aud":"https://other.example.com"`),
	"duplicate in a nested claim":       withClaims(`,"ext":{"role":"user","role":"admin"}`),
	"Scope":                             `{"sub":"ci-bot","aud":"` + audience + `","exp":1700003600,"Scope":"admin"}`,
	"SCOPE beside scope":                withClaims(`,"SCOPE":"admin"`),
	"NS":                                withClaims(`,"NS":"acme"`),
	"EXP":                               `{"sub":"ci-bot","aud":"` + audience + `","EXP":1700003600,"scope":"admin"}`,
	"Sub":                               withClaims(`,"Sub":"root"`),
	"long s in scope":                   withClaims(`,"\u017fcope":"admin"`),
	"exp as a string":                   `{"sub":"ci-bot","aud":"` + audience + `","exp":"1700003600","scope":"outbox:read"}`,
	"nbf as a string":                   withClaims(`,"nbf":"1699999000"`),
	"iat as a string":                   `{"sub":"ci-bot","aud":"` + audience + `","iat":"1699999940","exp":1700003600,"scope":"outbox:read"}`,
	"exp as an array":                   `{"sub":"ci-bot","aud":"` + audience + `","exp":[1700003600],"scope":"outbox:read"}`,
	"exp as true":                       `{"sub":"ci-bot","aud":"` + audience + `","exp":true,"scope":"outbox:read"}`,
	"nbf null":                          withClaims(`,"nbf":null`),
	"iss null":                          withClaims(`,"iss":null`),
	"scope null":                        `{"sub":"ci-bot","aud":"` + audience + `","exp":1700003600,"scope":null}`,
	"null inside aud":                   `{"sub":"ci-bot","aud":["` + audience + `",null],"exp":1700003600,"scope":"outbox:read"}`,
	"aud as a number":                   `{"sub":"ci-bot","aud":7,"exp":1700003600,"scope":"outbox:read"}`,
	"sub as a number":                   `{"sub":7,"aud":"` + audience + `","exp":1700003600,"scope":"outbox:read"}`,
	"scope as an array":                 `{"sub":"ci-bot","aud":"` + audience + `","exp":1700003600,"scope":["admin"]}`,
	"jti as a number":                   withClaims(`,"jti":7`),
	"invalid UTF-8 in sub":              "{\"sub\":\"ci-bot\xff\",\"aud\":\"" + audience + "\",\"exp\":1700003600,\"scope\":\"outbox:read\"}",
	"lone surrogate in scope":           `{"sub":"ci-bot","aud":"` + audience + `","exp":1700003600,"scope":"admin\ud800"}`,
	"invalid UTF-8 in an ignored claim": withClaims(",\"note\":\"\xc0\xaf\""),
	"claims an array":                   `[` + withClaims("") + `]`,
	"claims trailing data":              withClaims("") + ` {}`,
}

var forgedHeaders = map[string]string{
	"duplicate alg":         `{"alg":"none","alg":"HS256","typ":"JWT"}`,
	"duplicate typ":         `{"alg":"HS256","typ":"JOSE","typ":"JWT"}`,
	"ALG beside alg":        `{"alg":"HS256","typ":"JWT","ALG":"none"}`,
	"Typ beside typ":        `{"alg":"HS256","typ":"JWT","Typ":"JOSE"}`,
	"CRIT":                  `{"alg":"HS256","typ":"JWT","CRIT":["exp"]}`,
	"ALG alone":             `{"ALG":"HS256","typ":"JWT"}`,
	"Kid beside kid":        `{"alg":"HS256","typ":"JWT","kid":"a","Kid":"b"}`,
	"kid null":              `{"alg":"HS256","typ":"JWT","kid":null}`,
	"escaped duplicate alg": `{"alg":"none","\u0061lg":"HS256","typ":"JWT"}`,
	"invalid UTF-8 in kid":  "{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"\xff\"}",
	"header an array":       `[{"alg":"HS256","typ":"JWT"}]`,
}

// Forged tokens signed with the right key are 401 and say nothing of why
// beyond "invalid"; refused tokens are not remembered, so asking again is
// refused again; and a good token beside them keeps its own principal.
func TestForgedTokensWithLooseClaimsOrHeadersAreRefused(t *testing.T) {
	a := authFor(t, nil)
	h := router(a, slog.New(slog.DiscardHandler))
	good := signedHS256(t, hsHeader, withClaims(""))
	if p := mustAccept(t, a, good); !reflect.DeepEqual(p.Scopes, []httpapi.Scope{httpapi.ScopeOutboxRead}) || p.Namespace != "" || p.Subject != "ci-bot" {
		t.Fatalf("the control token: %+v", p)
	}
	tokens := map[string]string{}
	for name, c := range forgedClaims {
		tokens["claims: "+name] = signedHS256(t, hsHeader, c)
	}
	for name, hd := range forgedHeaders {
		tokens["header: "+name] = signedHS256(t, hd, withClaims(""))
	}
	for name, tok := range tokens {
		t.Run(name, func(t *testing.T) {
			for range 2 {
				mustRefuse(t, a, tok)
				for _, path := range []string{"/v1/admin/namespaces/acme/replay", "/v1/whoami"} {
					rec := call(h, http.MethodPost, path, bearer(tok)...)
					if path == "/v1/whoami" {
						rec = call(h, http.MethodGet, path, bearer(tok)...)
					}
					p := problemOf(t, rec, http.StatusUnauthorized, httpapi.SlugUnauthorized)
					if p.Detail != "the token is invalid" {
						t.Fatalf("detail %q says more than that the token is invalid", p.Detail)
					}
				}
			}
		})
	}
	if p := mustAccept(t, a, good); !reflect.DeepEqual(p.Scopes, []httpapi.Scope{httpapi.ScopeOutboxRead}) || p.Namespace != "" {
		t.Fatalf("the control token after the forgeries: %+v", p)
	}
}

// The tricks fail on EdDSA tokens too, where kid picks the key.
func TestForgedEdDSAHeadersAreRefused(t *testing.T) {
	pubA, privA, _ := ed25519.GenerateKey(rand.Reader)
	pubB, _, _ := ed25519.GenerateKey(rand.Reader)
	a := authFor(t, func(c *httpapi.AuthConfig) {
		c.HS256Secret = nil
		c.EdDSAKeys = []httpapi.EdDSAKey{{ID: "a", Key: pubA}, {ID: "b", Key: pubB}}
	})
	mustAccept(t, a, signedEdDSA(t, privA, `{"alg":"EdDSA","typ":"JWT","kid":"a"}`, withClaims("")))
	for _, hd := range []string{
		`{"alg":"EdDSA","typ":"JWT","kid":"b","kid":"a"}`,
		`{"alg":"EdDSA","typ":"JWT","kid":"a","KID":"b"}`,
		`{"alg":"HS256","alg":"EdDSA","typ":"JWT","kid":"a"}`,
	} {
		mustRefuse(t, a, signedEdDSA(t, privA, hd, withClaims("")))
	}
	mustRefuse(t, a, signedEdDSA(t, privA, `{"alg":"EdDSA","typ":"JWT","kid":"a"}`, withClaims(`,"scope":"admin"`)))
}

// Claims relay does not read are the issuer's: any name, null, nested
// objects. RFC 7519 times may have fractions; each is rounded against the
// token, so that it is good for no longer than it says.
func TestClaimsRelayIgnoresAreFree(t *testing.T) {
	a := authFor(t, nil) // t0 = 1700000000, 5 s of leeway
	p := mustAccept(t, a, signedHS256(t, hsHeader, withClaims(`,"preferredUsername":"Ci Bot","email":null,"realm_access":{"roles":["a","b"]},"Ünïcode":"✓"`)))
	if p.Subject != "ci-bot" || !reflect.DeepEqual(p.Scopes, []httpapi.Scope{httpapi.ScopeOutboxRead}) {
		t.Fatalf("principal %+v", p)
	}
	times := func(extra string) string {
		return signedHS256(t, hsHeader, `{"sub":"ci-bot","aud":"`+audience+`","scope":"outbox:read",`+extra+`}`)
	}
	// exp is good while now - leeway < exp: 1699999995.9 counts as ...995,
	// which is not after 1699999995.
	mustRefuse(t, a, times(`"exp":1699999995.9`))
	mustAccept(t, a, times(`"exp":1699999996.1`))
	mustAccept(t, a, times(`"exp":1.7000036e9`))
	// nbf is good while nbf <= now + leeway: 1700000005.1 counts as ...006.
	mustRefuse(t, a, times(`"exp":1700003600,"nbf":1700000005.1`))
	mustAccept(t, a, times(`"exp":1700003600,"nbf":1700000005`))
	mustRefuse(t, a, times(`"exp":1700003600,"iat":1700000005.1`))
	mustAccept(t, a, times(`"exp":1700003600,"iat":1700000004.9`))
	// Times beyond the year 9999 are refused, not wrapped.
	mustAccept(t, a, times(`"exp":253402300799`))
	mustRefuse(t, a, times(`"exp":253402300800`))
	mustRefuse(t, a, times(`"exp":1700003600,"nbf":-1`))
}

// A caller changing the principal it was given must not change what the
// token grants the next time it is sent: the remembered token is a copy.
func TestTheRememberedPrincipalCannotBeChangedByItsCaller(t *testing.T) {
	a := authFor(t, nil)
	good := signedHS256(t, hsHeader, withClaims(""))
	for range 3 {
		p := mustAccept(t, a, good)
		if !reflect.DeepEqual(p.Scopes, []httpapi.Scope{httpapi.ScopeOutboxRead}) {
			t.Fatalf("scopes %v", p.Scopes)
		}
		p.Scopes[0] = httpapi.ScopeAdmin
	}
}

// claimsView is who a token is, what it grants and where, as one reader
// of its claims sees it.
type claimsView struct {
	sub    string
	scopes []httpapi.Scope
	ns     string
}

func viewOf(sub, scope, ns string) claimsView {
	v := claimsView{sub: sub, ns: ns}
	for _, s := range strings.Split(scope, " ") {
		if s := httpapi.Scope(s); s.Valid() && !slices.Contains(v.scopes, s) {
			v.scopes = append(v.scopes, s)
		}
	}
	return v
}

// claimReaders read claims three ways JSON readers do: encoding/json into
// a struct (the last of duplicates, names matched regardless of case),
// into a map (the last, names exact), and the first of duplicates.
func claimReaders(payload []byte) map[string]claimsView {
	out := map[string]claimsView{}
	var st struct {
		Sub   string `json:"sub"`
		Scope string `json:"scope"`
		NS    string `json:"ns"`
	}
	if json.Unmarshal(payload, &st) == nil {
		out["struct"] = viewOf(st.Sub, st.Scope, st.NS)
	}
	str := func(raw json.RawMessage) string {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(payload, &m) == nil {
		out["map"] = viewOf(str(m["sub"]), str(m["scope"]), str(m["ns"]))
	}
	first := map[string]json.RawMessage{}
	dec := json.NewDecoder(bytes.NewReader(payload))
	if tok, err := dec.Token(); err == nil && tok == json.Delim('{') {
		for dec.More() {
			k, err := dec.Token()
			var v json.RawMessage
			if err != nil || dec.Decode(&v) != nil {
				break
			}
			if key, _ := k.(string); first[key] == nil {
				first[key] = v
			}
		}
		out["first"] = viewOf(str(first["sub"]), str(first["scope"]), str(first["ns"]))
	}
	return out
}

// FuzzVerifyClaims signs any claims with the right key. A token Verify
// accepts must read the same to every JSON reader: who it is, what it
// grants and where.
func FuzzVerifyClaims(f *testing.F) {
	f.Add(withClaims(""))
	f.Add(withClaims(`,"ns":"acme"`))
	for _, c := range forgedClaims {
		f.Add(c)
	}
	a := authFor(f, nil)
	f.Fuzz(func(t *testing.T, payload string) {
		p, err := a.Verify(signedHS256(t, hsHeader, payload))
		if err != nil {
			if !errors.Is(err, httpapi.ErrInvalidToken) {
				t.Fatalf("error %v does not wrap ErrInvalidToken", err)
			}
			return
		}
		got := claimsView{sub: p.Subject, scopes: p.Scopes, ns: p.Namespace}
		readers := claimReaders([]byte(payload))
		if len(readers) != 3 {
			t.Fatalf("Verify accepted claims a JSON reader refuses: %q", payload)
		}
		for name, v := range readers {
			if got.sub != v.sub || got.ns != v.ns || !slices.Equal(got.scopes, v.scopes) {
				t.Fatalf("Verify reads %+v, the %s reader %+v: %q", got, name, v, payload)
			}
		}
	})
}
