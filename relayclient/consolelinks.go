package relayclient

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Console link access: what a link's token may do in its namespace.
const (
	// AccessRead opens the namespace's console pages read-only.
	AccessRead = "read"
	// AccessWrite adds every action the console offers there.
	AccessWrite = "write"
)

// ConsoleLink is a link to one namespace's console pages, its token in the
// fragment: hand it on as a secret.
type ConsoleLink struct {
	URL       string    `json:"url"`
	Namespace string    `json:"namespace"`
	Access    string    `json:"access"`
	ExpiresAt time.Time `json:"expires_at"`
}

// CreateConsoleLink mints a link to the console's pages of ns (scope
// admin), with access AccessRead or AccessWrite, living for ttl (60 s to 7
// days; 0 is relay's default, an hour). A relay that verifies tokens with
// public keys only answers a *Problem of TypeCannotMint.
func (c *Client) CreateConsoleLink(ctx context.Context, ns, access string, ttl time.Duration) (ConsoleLink, error) {
	const op = "create console link"
	var out ConsoleLink
	if err := checkNamespace(op, ns); err != nil {
		return out, err
	}
	if access != AccessRead && access != AccessWrite {
		return out, fmt.Errorf("%w: %s: access must be %q or %q", ErrInvalid, op, AccessRead, AccessWrite)
	}
	if ttl != 0 && (ttl < time.Minute || ttl > 7*24*time.Hour || ttl%time.Second != 0) {
		return out, fmt.Errorf("%w: %s: ttl must be whole seconds from 1m to 168h", ErrInvalid, op)
	}
	body := struct {
		Access     string `json:"access"`
		TTLSeconds int64  `json:"ttl_seconds,omitempty"`
	}{access, int64(ttl / time.Second)}
	// Not retried: each call mints another link.
	a, err := c.do(ctx, call{op: op, method: http.MethodPost, path: "/v1/namespaces/" + ns + "/console-links", body: body, auth: true})
	if err != nil {
		return out, err
	}
	return out, decode(op, a, &out)
}
