package outbox_test

import (
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
)

// Each delivery call encodes its body and message id in a goroutine of its
// own, whose stack starts small: the Fresh variants count the stack growth
// that costs.

func BenchmarkEncodeWebhook(b *testing.B) {
	o := committed("r-7f3a")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := outbox.EncodeWebhook(&o, relayNS, relayAudience); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeWebhookFresh(b *testing.B) {
	o := committed("r-7f3a")
	done := make(chan error)
	b.ReportAllocs()
	for b.Loop() {
		go func() {
			_, err := outbox.EncodeWebhook(&o, relayNS, relayAudience)
			done <- err
		}()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMessageID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = outbox.MessageID(relayNS, "billing", 42, "r-7f3a")
	}
}

func BenchmarkMessageIDFresh(b *testing.B) {
	done := make(chan string)
	b.ReportAllocs()
	for b.Loop() {
		go func() { done <- outbox.MessageID(relayNS, "billing", 42, "r-7f3a") }()
		<-done
	}
}
