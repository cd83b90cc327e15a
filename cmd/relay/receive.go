package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/envflag"
)

// receiveConfig is a local receiver that verifies relay's webhooks and
// prints one line per request: a way to see what an endpoint will get.
type receiveConfig struct {
	listen       string
	keys         string
	audience     string
	namespaces   []string
	anyNamespace bool
	secrets      []string
	publicKeys   []string
	body         bool
}

func parseReceive(args []string) (receiveConfig, error) {
	fs := flag.NewFlagSet("relay receive", flag.ContinueOnError)
	var c receiveConfig
	fs.StringVar(&c.listen, "listen", "127.0.0.1:9000", "address to receive webhooks on")
	fs.StringVar(&c.keys, "keys", "", "relay's key list, an http(s) URL (e.g. http://127.0.0.1:8080/.well-known/mkit-hook-keys.json) or a file; verifies mkit-hook v2")
	fs.Func("namespace", "a relay namespace whose mkit-hook webhooks this receiver takes (repeat for several); the others are refused, since relay's one key signs every namespace's", func(s string) error {
		c.namespaces = append(c.namespaces, s)
		return nil
	})
	fs.BoolVar(&c.anyNamespace, "any-namespace", false, "take mkit-hook webhooks of every namespace instead of naming them with -namespace")
	fs.StringVar(&c.audience, "audience", "", "this receiver's origin as relay posts to it (default http://<listen>)")
	fs.Func("secret", "a whsec_ secret verifying Standard Webhooks (repeat during a rotation); RELAY_RECEIVE_SECRETS (space-separated) keeps them out of the process list", func(s string) error {
		c.secrets = append(c.secrets, s)
		return nil
	})
	fs.Func("public-key", "an endpoint's whpk_ public_key verifying Standard Webhooks v1a (repeat during a rotation); RELAY_RECEIVE_PUBLIC_KEYS (space-separated) also holds them", func(s string) error {
		c.publicKeys = append(c.publicKeys, s)
		return nil
	})
	fs.BoolVar(&c.body, "body", false, "print each verified body")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := envflag.NoArgs(fs, args); err != nil {
		return c, err
	}
	c.secrets = append(c.secrets, strings.Fields(os.Getenv("RELAY_RECEIVE_SECRETS"))...)
	c.publicKeys = append(c.publicKeys, strings.Fields(os.Getenv("RELAY_RECEIVE_PUBLIC_KEYS"))...)
	if c.keys == "" && len(c.secrets) == 0 && len(c.publicKeys) == 0 {
		return c, errors.New("receive needs -keys (mkit-hook v2), -secret (Standard Webhooks) or -public-key (Standard Webhooks v1a), or several")
	}
	switch {
	case c.keys == "" && (len(c.namespaces) > 0 || c.anyNamespace):
		return c, errors.New("-namespace and -any-namespace go with -keys: a Standard Webhooks secret or public key is the endpoint's own")
	case c.keys != "" && len(c.namespaces) == 0 && !c.anyNamespace:
		return c, errors.New("receive -keys needs -namespace NS, the namespace whose webhooks this receiver takes (relay signs every namespace's with one key), or -any-namespace")
	case len(c.namespaces) > 0 && c.anyNamespace:
		return c, errors.New("give -namespace or -any-namespace, not both")
	}
	if c.audience == "" {
		host, _, err := net.SplitHostPort(c.listen)
		if err != nil {
			return c, fmt.Errorf("-listen %q: %w", c.listen, err)
		}
		if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
			return c, fmt.Errorf("-listen %q names no host: set -audience to the origin relay posts to, e.g. https://hooks.example.com", c.listen)
		}
		c.audience = "http://" + c.listen
	}
	return c, nil
}

func receive(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parseReceive(args)
	if err != nil {
		return err
	}
	h, err := cfg.handler(ctx, stdout)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fmt.Fprintf(stdout, "receiving on http://%s (audience %s)\n", ln.Addr(), cfg.audience)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// handler verifies each request with the scheme its headers name and
// prints a line for it; a refused request is answered 401, so relay retries.
func (c receiveConfig) handler(ctx context.Context, stdout io.Writer) (http.Handler, error) {
	v := &eitherVerifier{}
	if c.keys != "" {
		list, err := loadKeyList(ctx, c.keys)
		if err != nil {
			return nil, err
		}
		v.mkit = &hookverify.MkitVerifier{Keys: list, Audience: c.audience, Namespaces: c.namespaces, AcceptAnyNamespace: c.anyNamespace}
		if err := v.mkit.Check(); err != nil {
			return nil, err
		}
	}
	// One verifier holds both: a webhook-signature header does not say
	// which version it carries until its entries are read. Given only
	// public keys, it refuses v1, which a holder of a secret could make.
	if len(c.secrets) > 0 || len(c.publicKeys) > 0 {
		v.standard = &hookverify.StandardVerifier{Secrets: c.secrets, PublicKeys: c.publicKeys}
		if err := v.standard.Check(); err != nil {
			return nil, err
		}
	}
	var mu sync.Mutex // one line per request, never interleaved
	printf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format, args...)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var event struct {
			Type string `json:"type"`
			Data struct {
				ReservationID string `json:"reservation_id"`
				Namespace     string `json:"namespace"`
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &event)
		// Quoted: a path or body field could otherwise forge a line. The
		// namespace is the signed one (mkit-hook) or under the endpoint's
		// own secret (Standard Webhooks).
		printf("verified %s %q %q namespace=%q reservation_id=%q\n", scheme(r.Header), r.URL.EscapedPath(), event.Type, event.Data.Namespace, event.Data.ReservationID)
		if c.body {
			printf("%s\n", body)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return hookverify.Middleware(v, next, hookverify.WithErrorHook(func(r *http.Request, err error) {
		printf("REJECTED %s %q: %v\n", scheme(r.Header), r.URL.EscapedPath(), err)
	})), nil
}

// scheme names the scheme a request's headers claim, as the printed lines
// show it.
func scheme(h http.Header) string { return string(hookverify.RequestScheme(h)) }

// eitherVerifier verifies with the scheme a request's headers name, as
// hookverify.EitherVerifier does; it names the flags that add a scheme when
// a request's has no verifier.
type eitherVerifier struct {
	mkit     *hookverify.MkitVerifier
	standard *hookverify.StandardVerifier
}

func (v *eitherVerifier) VerifyRequest(r *http.Request, body []byte) error {
	err := (&hookverify.EitherVerifier{Mkit: v.mkit, Standard: v.standard}).VerifyRequest(r, body)
	if errors.Is(err, hookverify.ErrNoScheme) {
		return fmt.Errorf("receive: %w (see -keys, -secret and -public-key)", err)
	}
	return err
}

// loadKeyList reads relay's published key list from an http(s) URL, under
// hookverify.FetchKeyList's rules, or from a file.
func loadKeyList(ctx context.Context, src string) (hookverify.KeyList, error) {
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		return hookverify.FetchKeyList(ctx, src)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return hookverify.KeyList{}, fmt.Errorf("key list: %w", err)
	}
	list, err := hookverify.ParseKeyList(data)
	if err != nil {
		return hookverify.KeyList{}, fmt.Errorf("key list %s: %w", src, err)
	}
	return list, nil
}
