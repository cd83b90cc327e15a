package outbox_test

import (
	"errors"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// Every registration checks the rule, whatever calls it, and writes
// nothing when it breaks it.
func TestARegistrationWithAURLARequestLineCannotCarryWritesNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *env) {
		_, err := e.admin().PutEndpoint(e.Ctx, e.P, "billing", outbox.EndpointSpec{URL: "https://billing.acme.example/w?q=x HTTP/1.0 y", Enabled: true})
		if !errors.Is(err, outbox.ErrInvalid) {
			t.Fatalf("put: %v, want ErrInvalid", err)
		}
		key, _ := schema.EndpointKey("billing")
		if _, found := e.Get(key); found {
			t.Fatal("the endpoint was stored")
		}
	})
}
