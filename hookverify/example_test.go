package hookverify_test

import (
	"fmt"
	"time"

	"github.com/hookrelay/relay/hookverify"
)

// The examples that need a relay's signature are in relay's module
// (internal/verifycheck), which signs as relay does.

// A NonceCache remembers each nonce until its signature expires, on the
// clock it is given; share one between verifiers to size it or to keep it
// across a change of configuration.
func ExampleNonceCache() {
	now := time.UnixMilli(1_764_460_800_000)
	cache := hookverify.NewNonceCache(2, func() time.Time { return now })
	expires := now.Add(hookverify.MaxWindow)

	fmt.Println(cache.Record("nonce-a", expires))
	fmt.Println(cache.Record("nonce-a", expires))
	fmt.Println(cache.Record("nonce-b", expires))
	fmt.Println(cache.Record("nonce-c", expires)) // full: refused, not forgotten
	now = expires                                 // both signatures have expired
	fmt.Println(cache.Record("nonce-c", now.Add(time.Minute)), cache.Len())
	// Output:
	// <nil>
	// hookverify: replayed nonce: nonce was accepted before
	// <nil>
	// hookverify: nonce cache full: 2 unexpired nonces
	// <nil> 1
}

// CheckKeyListURL applies FetchKeyList's trust rule to a configured URL
// without fetching, so a receiver can refuse to start on a bad one.
func ExampleCheckKeyListURL() {
	for _, u := range []string{
		"https://relay.example.com/.well-known/mkit-hook-keys.json",
		"http://127.0.0.1:8080/.well-known/mkit-hook-keys.json",
		"http://relay.example.com/.well-known/mkit-hook-keys.json",
	} {
		fmt.Println(hookverify.CheckKeyListURL(u) == nil)
	}
	// Output:
	// true
	// true
	// false
}
