package signing_test

import (
	"bytes"
	"testing"

	"github.com/hookrelay/relay/internal/signing"
)

// The signing cost alone, apart from HTTP: one attempt of a 1 KiB body.

func BenchmarkSignMkit(b *testing.B) {
	s := sigSigner(b, "relay-1", sigKey(1))
	ep := sigURL(b, "https://hooks.example.com/in")
	body := bytes.Repeat([]byte("x"), 1024)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sign(ep, sigNS, body, sigT0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signatures/s")
}

func BenchmarkSignStandard(b *testing.B) {
	secrets := []string{sigSecret(1)}
	body := bytes.Repeat([]byte("x"), 1024)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := signing.SignStandard("msg_r-7f3a_billing", secrets, body, sigT0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signatures/s")
}
