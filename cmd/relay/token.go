package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hookrelay/relay/internal/app"
	"github.com/hookrelay/relay/internal/console"
	"github.com/hookrelay/relay/internal/envflag"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/signing"
)

// scopeList collects --scope flags; each may hold several scopes separated
// by spaces or commas.
type scopeList []httpapi.Scope

func (l *scopeList) String() string {
	names := make([]string, len(*l))
	for i, s := range *l {
		names[i] = string(s)
	}
	return strings.Join(names, " ")
}

func (l *scopeList) Set(v string) error {
	for f := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
		s := httpapi.Scope(f)
		if !s.Valid() {
			return fmt.Errorf("unknown scope %q (known: %s)", f, knownScopes())
		}
		*l = append(*l, s)
	}
	return nil
}

func knownScopes() string {
	var names []string
	for _, s := range httpapi.Scopes() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// token mints an API token and prints it alone on a line, so that
// TOKEN=$(relay token ...) works. It signs HS256 with the secret relay
// serve verifies with, or EdDSA with --key.
func token(args []string, stdout io.Writer) error {
	fs := envflag.New("relay token")
	var scopes scopeList
	fs.Var(&scopes, "scope", "scope to grant, repeatable or space-separated: "+knownScopes()+" (admin implies the others)")
	ns := fs.String("ns", "", "bind the token to this namespace; unbound when empty")
	ttl := fs.Duration("ttl", time.Hour, "lifetime of the token")
	sub := fs.String("sub", "relay-cli", "subject: who the token speaks for, as the access log shows it")
	keyFile := fs.String("key", "", "sign EdDSA with this Ed25519 PKCS#8 PEM private key (relay keygen writes one) instead of the HS256 secret")
	kid := fs.String("kid", "", "kid header for --key, naming the key among RELAY_JWT_PUBLIC_KEYS")
	asLink := fs.Bool("console", false, "print a link to the console at the public URL carrying the token (in the fragment, which browsers keep to themselves) instead of the token")
	var secret, audience, publicURL, issuer string
	fs.HiddenFromEnv(&secret, "jwt-secret", "RELAY_JWT_SECRET", "HS256 secret relay serve verifies with (env RELAY_JWT_SECRET)")
	fs.StringFromEnv(&audience, "jwt-audience", "RELAY_JWT_AUDIENCE", "", "aud of the token (env RELAY_JWT_AUDIENCE; default the public URL)")
	fs.StringFromEnv(&publicURL, "public-url", "RELAY_PUBLIC_URL", "", "relay's public URL, the default audience (env RELAY_PUBLIC_URL; default http://127.0.0.1:8080, or what RELAY_LISTEN gives)")
	fs.StringFromEnv(&issuer, "jwt-issuer", "RELAY_JWT_ISSUER", "", "iss of the token (env RELAY_JWT_ISSUER)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	secretFlag := fs.Given("jwt-secret")
	if len(scopes) == 0 {
		return fmt.Errorf("give at least one --scope (%s)", knownScopes())
	}
	if *ns != "" && !httpapi.ValidNamespace(*ns) {
		return fmt.Errorf("--ns %q is not a namespace: 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit", *ns)
	}
	if *ttl <= 0 {
		return fmt.Errorf("--ttl %v must be positive", *ttl)
	}
	if *sub == "" {
		return errors.New("--sub must not be empty")
	}
	// What relay serve defaults its audience to, spelled the same way: the
	// public URL, which is also where the console is.
	listen := app.Defaults().Listen
	if v := os.Getenv("RELAY_LISTEN"); v != "" {
		listen = v
	}
	origin, err := (app.Delivery{PublicURL: publicURL}).Audience(true, listen)
	if err != nil {
		return err
	}
	if audience == "" {
		audience = origin
	}
	p := httpapi.Principal{Subject: *sub, Scopes: scopes, Namespace: *ns}
	now := time.Now()
	var tok string
	switch {
	case *keyFile != "" && secretFlag:
		return errors.New("give --key or --jwt-secret, not both")
	case *keyFile != "":
		key, err := signing.LoadKey(*keyFile)
		if err != nil {
			return err
		}
		if tok, err = httpapi.MintEdDSA(key, *kid, audience, issuer, p, *ttl, now); err != nil {
			return err
		}
	case secret != "":
		if *kid != "" {
			return errors.New("--kid goes with --key; HS256 tokens carry no kid")
		}
		if len(secret) < httpapi.MinHS256Secret {
			return fmt.Errorf("RELAY_JWT_SECRET (--jwt-secret) is %d bytes; it must be at least %d", len(secret), httpapi.MinHS256Secret)
		}
		if tok, err = httpapi.MintHS256([]byte(secret), audience, issuer, p, *ttl, now); err != nil {
			return err
		}
	case *asLink:
		// The embedded default signs with a secret made at its start,
		// which no other process knows: it mints links itself.
		ns := *ns
		if ns == "" {
			ns = "NS"
		}
		return fmt.Errorf("no signing key: a development server (no RELAY_JWT_SECRET) signs with a secret made at its start, which no other process knows. "+
			"Open the console link it printed at start, or ask it for a link to one namespace:\n\n  curl -X POST -H \"Authorization: Bearer $RELAY_TOKEN\" -H 'Content-Type: application/json' -d '{\"access\": \"read\"}' %s/v1/namespaces/%s/console-links\n\n"+
			"For a relay with a secret, set RELAY_JWT_SECRET (or --jwt-secret) to it, or give --key FILE", origin, ns)
	default:
		return errors.New("no signing key: set RELAY_JWT_SECRET (or --jwt-secret) to the secret relay serve verifies with, or give --key FILE; a development server with neither prints its own admin token at start")
	}
	if *asLink {
		tok = console.Link(origin, tok)
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}
