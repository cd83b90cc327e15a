package httpapi

import (
	"net/http"
	"time"

	"github.com/hookrelay/relay/internal/console"
)

// A console link is a token for one namespace's console pages, read-only
// or with the namespace's writes, living for a set time, in a link an
// admin hands to whoever should see those pages (a platform's customer,
// say): relay mints it with its HS256 secret. The token rides in the
// link's fragment, which browsers keep to themselves.

// Console link lifetimes.
const (
	DefaultConsoleLinkTTL = time.Hour
	MinConsoleLinkTTL     = time.Minute
	MaxConsoleLinkTTL     = 7 * 24 * time.Hour
)

// Console link access: what the link's token may do in its namespace.
const (
	AccessRead  = "read"
	AccessWrite = "write"
)

// consoleLinkScopes are the scopes each access grants, within the link's
// namespace only: writes are the console's actions (replay, resend,
// recover, erase, endpoint changes), which take admin.
var consoleLinkScopes = map[string][]Scope{
	AccessRead:  {ScopeOutboxRead},
	AccessWrite: {ScopeAdmin},
}

type consoleLinkView struct {
	URL       string `json:"url"`
	Namespace string `json:"namespace"`
	Access    string `json:"access"`
	ExpiresAt string `json:"expires_at"`
}

// postConsoleLink mints a console link for the namespace. Only a secret
// signs one: a relay that verifies with public keys alone has none and
// says so.
func (a *api) postConsoleLink(w http.ResponseWriter, r *http.Request) {
	p, prob := partition(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	var body struct {
		Access     *string `json:"access"`
		TTLSeconds *int64  `json:"ttl_seconds"`
	}
	if prob := readJSON(r, &body); prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	if body.Access == nil {
		WriteProblem(w, r, NewProblem(SlugInvalidRequest, `access is required: "read" or "write"`))
		return
	}
	scopes, ok := consoleLinkScopes[*body.Access]
	if !ok {
		WriteProblem(w, r, NewProblem(SlugInvalidRequest, `access must be "read" or "write"`))
		return
	}
	ttl := DefaultConsoleLinkTTL
	if body.TTLSeconds != nil {
		s := *body.TTLSeconds
		if s < int64(MinConsoleLinkTTL/time.Second) || s > int64(MaxConsoleLinkTTL/time.Second) {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "ttl_seconds must be 60 to 604800 (7 days)"))
			return
		}
		ttl = time.Duration(s) * time.Second
	}
	if !a.Auth.CanMint() {
		WriteProblem(w, r, NewProblem(SlugCannotMint, "relay verifies tokens with public keys only (RELAY_JWT_PUBLIC_KEYS) and holds no secret to sign one: "+
			"mint a token with `relay token --key FILE --ns NS --scope outbox:read --console`"))
		return
	}
	subject := "console-link"
	if pr, ok := PrincipalFrom(r.Context()); ok {
		subject = clip("console-link from "+pr.Subject, maxLoggedText)
	}
	now := a.Clock.Now()
	tok, err := a.Auth.Mint(Principal{Subject: subject, Scopes: scopes, Namespace: p.Namespace}, ttl)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.audit(r, "console link minted", "namespace", p.Namespace, "access", *body.Access, "ttl", ttl.String())
	WriteJSON(w, http.StatusCreated, consoleLinkView{
		URL:       console.Link(a.PublicURL, tok),
		Namespace: p.Namespace,
		Access:    *body.Access,
		ExpiresAt: rfc3339(now.Add(ttl).UnixMilli()),
	})
}
