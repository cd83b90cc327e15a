package main

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/relaytest"
)

// relay serve, started on a Redis URL whose password holds what a URL
// parser takes for a delimiter or a broken escape, against a port nothing
// listens on, fails to start; nothing it prints holds any piece of the
// password as written or as decoded.
func TestNoPieceOfARedisPasswordReachesTheStartUpOutput(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "hook.pem")
	if err := keygen([]string{"-out", keyFile}, io.Discard); err != nil {
		t.Fatal(err)
	}
	closed := strings.TrimPrefix(relaytest.FreeAddr(t), "127.0.0.1:")
	closed2 := strings.TrimPrefix(relaytest.FreeAddr(t), "127.0.0.1:")
	const a, b = "Zq8Kv", "Wm3Jx"
	for _, tc := range []struct{ url, password string }{
		{"redis://:" + a + "/" + b + "@127.0.0.1:" + closed + "/0", a + "/" + b},
		{"redis://:48213/" + b + "@127.0.0.1:" + closed + "/0", "48213/" + b},
		{"redis://:48213/" + b + "@127.0.0.1:" + closed + "/0", "48213"},
		{"redis://user:" + a + "#" + b + "@127.0.0.1:" + closed + "/0", a + "#" + b},
		{"redis://user:" + a + "?" + b + "@127.0.0.1:" + closed + "/0", a + "?" + b},
		{"redis://user:" + a + "%zz" + b + "@127.0.0.1:" + closed + "/0", a + "%zz" + b},
		{"redis://user:" + a + "%z" + "@127.0.0.1:" + closed + "/0", a + "%z"},
		{"redis://:" + a + "@" + b + "@127.0.0.1:" + closed + "/0", a + "@" + b},
		{"redis://:" + a + "%2F" + b + "@127.0.0.1:" + closed + "/0", a + "%2F" + b},
		{"redis://:" + a + "%2F" + b + "@127.0.0.1:" + closed + "/0", a + "/" + b},
		{"redis://:" + a + "," + b + "@127.0.0.1:" + closed + "/0", a + "," + b},
		{"redis://:" + a + " " + b + "@127.0.0.1:" + closed + "/0", a + " " + b},
		{"redis://:" + a + "]" + b + "@127.0.0.1:" + closed + "/0", a + "]" + b},
		{"redis://:" + a + ":" + b + "@127.0.0.1:" + closed + "/0", a + ":" + b},
		{"rediss://relay:" + a + b + "@127.0.0.1:" + closed + "/0", a + b},
		{"redis://:" + a + "/" + b + "@127.0.0.1:" + closed + "?addr=127.0.0.1:" + closed2, a + "/" + b},
		{"redis://:" + a + "#" + b + "@127.0.0.1:" + closed + "?addr=127.0.0.1:" + closed2, a + "#" + b},
		{"redis://:" + a + b + "@127.0.0.1:" + closed + "?addr=127.0.0.1:" + closed2, a + b},
		{"redis://:" + a + "@127.0.0.1:" + closed + ",127.0.0.1:" + closed2, a},
		{"relay:" + a + b + "@127.0.0.1:" + closed + ",127.0.0.1:" + closed2, a + b},
		{"unix://:" + a + "/" + b + "@/nonexistent/redis.sock", a + "/" + b},
		{"127.0.0.1:" + closed + "/" + a + b, a + b},
	} {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), settle)
			defer cancel()
			cmd := exec.CommandContext(ctx, relaytest.Binary(t), "serve", "-redis", tc.url)
			cmd.Env = []string{
				"RELAY_LISTEN=" + relaytest.FreeAddr(t),
				"RELAY_PUBLIC_URL=https://relay.example.com",
				"RELAY_JWT_SECRET=" + strings.Repeat("s", 32),
				"RELAY_HOOK_KEY_FILE=" + keyFile,
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err == nil || ctx.Err() != nil {
				t.Fatalf("relay on a closed port: %v, context %v\n%s", err, ctx.Err(), out.String())
			}
			secrets := []string{tc.password}
			if d, err := url.PathUnescape(tc.password); err == nil && d != tc.password {
				secrets = append(secrets, d)
			}
			for _, s := range secrets {
				for _, f := range redistest.Fragments(s) {
					if strings.Contains(out.String(), f) {
						t.Fatalf("relay printed %q, a piece of the password %q of %s:\n%s", f, s, tc.url, out.String())
					}
				}
			}
			if !strings.Contains(out.String(), "relay:") {
				t.Fatalf("no start-up error:\n%s", out.String())
			}
		})
	}
}

// A Redis URL whose password holds a space, left unquoted, splits into two
// arguments, and one given without -redis is an argument too: whatever
// subcommand is left with arguments after its flags says how many and
// where, never what they are.
func TestAStrayArgumentIsNotQuoted(t *testing.T) {
	const secret = "Zq8KvWm3Jx"
	split := []string{"-redis", "redis://:pass", secret + "@127.0.0.1:6379"}
	whole := "redis://:" + secret + "@127.0.0.1:6379"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"serve"}, split...), "relay serve takes flags only, but 1 unexpected argument(s) follow them, from argument 3 on"},
		{split, "1 unexpected argument(s) follow them, from argument 3 on"},
		{[]string{"serve", whole}, "1 unexpected argument(s) follow them, from argument 1 on"},
		{[]string{"serve", whole, "-listen", "127.0.0.1:0"}, "3 unexpected argument(s)"},
		{append([]string{"bench"}, split...), "relay bench takes flags only"},
		{[]string{"receive", "-keys", "keys.json", whole}, "relay receive takes flags only"},
		{[]string{"token", "-scope", "admin", whole}, "relay token takes flags only"},
		{[]string{"keygen", "-out", "/nonexistent/hook.pem", whole}, "relay keygen takes flags only"},
		{[]string{whole}, "unknown command"},
	} {
		cmd := exec.Command(relaytest.Binary(t), tc.args...)
		cmd.Env = []string{"RELAY_JWT_SECRET=" + strings.Repeat("s", 32)}
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%v succeeded:\n%s", tc.args, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%v printed no %q:\n%s", tc.args, tc.want, out)
		}
		for _, f := range redistest.Fragments(secret) {
			if strings.Contains(string(out), f) {
				t.Fatalf("%v printed %q of the password:\n%s", tc.args, f, out)
			}
		}
	}
}

// The usage text a bad flag or -help prints shows each flag's default, and
// the Redis URL's default comes from RELAY_REDIS_URL: it must not show it.
func TestUsageDoesNotShowTheRedisURLFromTheEnvironment(t *testing.T) {
	const secret = "Zq8KvWm3Jx"
	for _, args := range [][]string{{"serve", "-nosuchflag"}, {"serve", "-help"}, {"bench", "-nosuchflag"}, {"bench", "-help"}} {
		cmd := exec.Command(relaytest.Binary(t), args...)
		cmd.Env = []string{"RELAY_REDIS_URL=redis://relay:" + secret + "@127.0.0.1:1/0"}
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%v succeeded", args)
		}
		if !strings.Contains(string(out), "-redis") {
			t.Fatalf("%v printed no usage:\n%s", args, out)
		}
		for _, f := range redistest.Fragments(secret) {
			if strings.Contains(string(out), f) {
				t.Fatalf("%v printed %q of the password:\n%s", args, f, out)
			}
		}
	}
}
