package app

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestThePublicURLMustBeAnOriginAndIsRequiredWithARealRedis(t *testing.T) {
	for _, tc := range []struct {
		raw, listen string
		dev         bool
		want, err   string
	}{
		{raw: "https://relay.example.com", want: "https://relay.example.com"},
		{raw: "https://relay.example.com/", want: "https://relay.example.com"},
		{raw: "http://relay.example.com:8080", want: "http://relay.example.com:8080"},
		{dev: true, listen: "127.0.0.1:8080", want: "http://127.0.0.1:8080"},
		{err: "required"},
		{raw: "https://relay.example.com/api", err: "must be an origin"},
		{raw: "relay.example.com", err: "must be an origin"},
		{raw: "https://user@relay.example.com", err: "must be an origin"},
		{raw: "ftp://relay.example.com", err: "must be an origin"},
		{raw: "HTTPS://Relay.Example.COM:443", want: "https://relay.example.com"},
		{raw: "https://relay.example.com.", err: "must be an origin"},
		{raw: "https://relay.example.com:0443", err: "must be an origin"},
		{raw: "https://[2001:DB8::1]", want: "https://[2001:db8::1]"},
		{raw: "https://[2001:db8:0::1]", err: "must be an origin"},
		{dev: true, listen: ":8080", want: "http://localhost:8080"},
		{dev: true, listen: "0.0.0.0:8080", want: "http://localhost:8080"},
		{dev: true, listen: "[::1]:8080", want: "http://[::1]:8080"},
	} {
		c := Delivery{PublicURL: tc.raw}
		got, err := c.Audience(tc.dev, tc.listen)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %q, %v; want an error saying %q", tc.raw, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.raw, got, err, tc.want)
		}
	}
}

func TestTheAllowListParsesCIDRsAndOpensLoopbackOnlyInDevelopment(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := Delivery{AllowCIDRs: " 10.1.2.3/32, fd00::/8 "}
	got, err := c.allowList(false, log)
	if err != nil || len(got) != 2 || got[0].String() != "10.1.2.3/32" || got[1].String() != "fd00::/8" {
		t.Fatalf("%v %v", got, err)
	}
	if got, err := (Delivery{}).allowList(false, log); err != nil || len(got) != 0 {
		t.Fatalf("production default %v %v, want nothing allowed", got, err)
	}
	if got, err := (Delivery{}).allowList(true, log); err != nil || len(got) != 2 || !got[0].Addr().IsLoopback() {
		t.Fatalf("development default %v %v, want loopback", got, err)
	}
	if _, err := (Delivery{AllowCIDRs: "10.1.2.3"}).allowList(false, log); err == nil || !strings.Contains(err.Error(), "10.1.2.3") {
		t.Fatalf("a bare address: %v, want an error naming it", err)
	}
}

func TestANegativeSlowLaneIsRefused(t *testing.T) {
	if _, err := newChannel(Delivery{Concurrency: 1, SlowConcurrency: -1}, nil); err == nil || !strings.Contains(err.Error(), "slow concurrency") {
		t.Fatalf("a negative slow lane: %v, want refused", err)
	}
}
