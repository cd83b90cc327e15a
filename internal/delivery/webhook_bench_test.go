package delivery

import (
	"context"
	"crypto/ed25519"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/signing"
)

// BenchmarkWebhooksDeliver is one delivery call as the handler makes it:
// the sink encodes, signs and posts a committed outcome to a loopback
// receiver on a goroutine of the call's own, a new one ("goroutine") or a
// call worker ("worker"). cpu-µs/op is this process's, the receiver's
// included.
func BenchmarkWebhooksDeliver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	ch, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ch.CloseIdleConnections)
	signer, err := signing.NewMkitSigner("relay-1", ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		b.Fatal(err)
	}
	sink := &Webhooks{Sender: &outbound.Sender{Channel: ch, Mkit: signer}, Audience: "https://relay.example.com"}
	secret := schema.Secret(schema.SecretPrefix + "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s=")
	for _, scheme := range []schema.Scheme{schema.SchemeStandardWebhooks, schema.SchemeMkitHookV2} {
		parcel := Parcel{
			Namespace: "acme", EndpointID: "billing", Seq: 42,
			Endpoint: schema.Endpoint{URL: srv.URL + "/hooks/relay?token=t", Scheme: scheme,
				Secrets: []schema.Secret{secret}, Enabled: true, MaxInFlight: 1},
			Outcome: schema.Outcome{ReservationID: "r-7f3a", Repository: "acme/widgets", OccurredUnixMs: 1_764_460_800_000,
				Committed: &schema.Committed{BytesStored: 1024, NewToRepo: 512, NewToStore: 256,
					Refs: []schema.Ref{{Name: "refs/heads/main", New: strings.Repeat("ab", 32)}}}},
		}
		for _, on := range []string{"goroutine", "worker"} {
			b.Run(string(scheme)+"/"+on, func(b *testing.B) {
				ctx := context.Background()
				done := make(chan error, 1)
				call := func() {
					_, err := sink.DeliverStatus(ctx, parcel)
					done <- err
				}
				b.ReportAllocs()
				cpu := processCPU()
				for b.Loop() {
					if on == "worker" {
						callWorkers.run(call)
					} else {
						go call()
					}
					if err := <-done; err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			})
		}
	}
}
