package outbox_test

import (
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

func TestSecretLookingHeaderNames(t *testing.T) {
	for n, want := range map[string]bool{
		"authorization": true, "x-api-key": true, "x-auth-token": true, "x-client-secret": true,
		"cookie": true, "x-session-id": true, "x-password": true, "x-credentials": true,
		"x-access-token": true, "apikey": true, "x-signature": true,
		"x-tenant": false, "x-request-source": false, "accept": false, "x-region": false,
	} {
		if got := outbox.SecretHeader(n, "acme"); got != want {
			t.Errorf("SecretHeader(%q) = %v, want %v", n, got, want)
		}
	}
}

// A credential under a harmless-looking name is write-only too: told by
// its scheme, its shape, a well-known prefix, or its length and mix of
// characters. Identifiers, versions, UUIDs and words are shown.
func TestCredentialLookingHeaderValues(t *testing.T) {
	for v, want := range map[string]bool{
		"Bearer sk_live_4eC39HqLyjWDarjtT1zdp7dc": true,
		"bearer abc":                               true,
		"Basic dXNlcjpwYXNz":                       true,
		"Digest username=\"a\", response=\"b\"":    true,
		"Token abc":                                true,
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig": true,
		"jwt=eyJhbGciOiJIUzI1NiJ9":                 true,
		"sk_live_4eC39HqLyjWD":                     true,
		"sk_test_abc":                              true,
		"ghp_abc":                                  true,
		"gho_abc":                                  true,
		"github_pat_11ABC":                         true,
		"xoxb-123-456":                             true,
		"xoxp-1":                                   true,
		"AKIAIOSFODNN7EXAMPLE":                     true,
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw":   true,
		"glpat-abc":                                true,
		"key=ghp_abc, region=eu":                   true,
		"Zq8KvWm3JxT2pL9sNc4RfA7y":                 true,
		"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b": true,
		"acme":                                 false,
		"eu-west-1":                            false,
		"v2":                                   false,
		"3f2a9c1e-7b4d-4e8f-9a6b-2c1d0e5f4a3b": false,
		"3F2A9C1E-7B4D-4E8F-9A6B-2C1D0E5F4A3B": false,
		"application/vnd.acme+json; version=2": false,
		"billing-service-production-eu":        false,
		"Acme Corp Billing":                    false,
		"1764460800000":                        false,
		"bearer":                               false,
		"a bearer of news":                     false,
	} {
		if got := outbox.SecretHeader("x-tenant", schema.HeaderValue(v)); got != want {
			t.Errorf("SecretHeader(x-tenant, %q) = %v, want %v", v, got, want)
		}
	}
}
