package delivery

import (
	"errors"
	"strconv"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

func cacheEndpointRow(t testing.TB, url string) store.Value {
	t.Helper()
	v, err := schema.EncodeEndpoint(&schema.Endpoint{URL: url, Scheme: schema.SchemeStandardWebhooks,
		Secrets: []schema.Secret{schema.SecretPrefix + "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="}, Enabled: true, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEndpointCacheDecodesAChangedRowAfresh: the same row bytes give the
// endpoint decoded before; other bytes are decoded, and a row that does not decode is refused as
// DecodeEndpoint refuses it, and not kept.
func TestEndpointCacheDecodesAChangedRowAfresh(t *testing.T) {
	t.Parallel()
	var c endpointCache
	row := cacheEndpointRow(t, "https://hooks.example.com/a")
	first, err := c.decode("acme", "billing", row)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.decode("acme", "billing", append(store.Value(nil), row...))
	if err != nil || &again.Secrets[0] != &first.Secrets[0] {
		t.Fatalf("the same bytes were decoded again (%v)", err)
	}
	edited, err := c.decode("acme", "billing", cacheEndpointRow(t, "https://hooks.example.com/b"))
	if err != nil || edited.URL != "https://hooks.example.com/b" {
		t.Fatalf("an edited row gave %q (%v), want the new URL", edited.URL, err)
	}
	bad := append(store.Value(nil), row...)
	bad[len(bad)-1] = ' '
	if _, err := c.decode("acme", "billing", bad); err == nil || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("a corrupt row: %v, want store.ErrCorrupt", err)
	}
	if got, err := c.decode("acme", "billing", cacheEndpointRow(t, "https://hooks.example.com/b")); err != nil || got.URL != "https://hooks.example.com/b" {
		t.Fatalf("after a corrupt row: %q (%v)", got.URL, err)
	}
}

func TestEndpointCacheIsBounded(t *testing.T) {
	t.Parallel()
	var c endpointCache
	row := cacheEndpointRow(t, "https://hooks.example.com/a")
	for i := range 3 * maxCachedEndpoints {
		if _, err := c.decode("ns-"+strconv.Itoa(i), "billing", row); err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	c.m.Range(func(any, any) bool { held++; return true })
	if held > maxCachedEndpoints || held == 0 {
		t.Fatalf("%d endpoints held, want 1 to %d", held, maxCachedEndpoints)
	}
}

// BenchmarkEndpointDecode is a fire's read of its endpoint row: decoded
// each time ("decode") or taken from the cache when the bytes are the same
// ("cached").
func BenchmarkEndpointDecode(b *testing.B) {
	row := cacheEndpointRow(b, "https://hooks.example.com/a?token=x")
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := schema.DecodeEndpoint(row); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		var c endpointCache
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.decode("acme", "billing", row); err != nil {
				b.Fatal(err)
			}
		}
	})
}
