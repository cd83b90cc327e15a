package hookverify_test

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/hooks"
)

// A receiver at https://hooks.example.com, for relay namespace acme, checks
// relay's mkit-hook webhooks before handling them: a replayed request is
// refused, and so is one relay signed for another namespace (another tenant
// of the same relay that registered this URL as its own endpoint).
func Example() {
	keys, err := hookverify.ParseKeyList(relayKeyList()) // from relay's /.well-known/mkit-hook-keys.json
	if err != nil {
		log.Fatal(err)
	}
	v := &hookverify.MkitVerifier{Keys: keys, Audience: "https://hooks.example.com", Namespaces: []string{"acme"}}
	handler := hookverify.Middleware(v, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("handled %s\n", body)
		fmt.Fprintln(w, "ok")
	}))

	post := func(header http.Header, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "https://hooks.example.com/hooks/relay", bytes.NewReader(body))
		maps.Copy(r.Header, header)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	header, body := relayDelivery("acme") // what relay posts to https://hooks.example.com/hooks/relay
	post(header, body)
	post(header, body)
	post(relayDelivery("other"))
	// Output:
	// handled {"type":"outcome.expired","data":{"reservation_id":"r-1","namespace":"acme"}}
	// 200 ok
	// 401 hookverify: replayed nonce: nonce was accepted before
	// 401 hookverify: namespace not accepted: other is not a namespace this receiver takes
}

// exampleSigner stands in for relay's signing key.
var exampleSigner, _ = hooks.NewMkitSigner("relay-2025-11", seedKey(1))

func relayKeyList() []byte {
	list, err := hooks.NewKeyList(exampleSigner.PublicKey())
	if err != nil {
		log.Fatal(err)
	}
	rec := httptest.NewRecorder()
	hooks.KeysHandler(list).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, hooks.KeysPath, nil))
	return rec.Body.Bytes()
}

func relayDelivery(ns string) (http.Header, []byte) {
	body := []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-1","namespace":"` + ns + `"}}`)
	u, _ := url.Parse("https://hooks.example.com/hooks/relay")
	h, err := exampleSigner.Sign(u, ns, body, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	return h, body
}
