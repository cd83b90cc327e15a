package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/buildinfo"
	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/signing"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func testKeys(t *testing.T) signing.KeyList {
	t.Helper()
	sign, err := (Signing{KeyID: "test"}).load(true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return sign.keys
}

// routes is the API on st, publishing keys, with the readiness check serve
// uses on the wall clock.
func routes(t *testing.T, st *redisstore.Store, keys signing.KeyList) http.Handler {
	t.Helper()
	return routesReady(t, st, keys, ready(st, clock.NewSteady(clock.System{}), slog.New(slog.DiscardHandler)))
}

// routesReady is routes with the readiness check rd.
func routesReady(t *testing.T, st *redisstore.Store, keys signing.KeyList, rd func(context.Context) error) http.Handler {
	t.Helper()
	auth, err := httpapi.NewAuth(httpapi.AuthConfig{Audience: "http://localhost:8080", HS256Secret: bytes.Repeat([]byte("k"), 32)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{
		Appender: &outbox.Appender{Store: st, Clock: clock.NewSteady(clock.System{})},
		Admin:    &outbox.Admin{Store: st, Clock: clock.NewSteady(clock.System{})},
		Auth:     auth,
		Ready:    rd,
		Keys:     signing.KeysHandler(keys),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestReadyWhenTheStoreAnswersAndCannotEvict(t *testing.T) {
	h := routes(t, redistest.Miniredis(t), testKeys(t))
	if code, body := get(t, h, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, h, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz = %d %q", code, body)
	}
}

func TestNotReadyOnARedisThatMayEvictRows(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	h := routes(t, redistest.NewStore(t, srv.Client, redisstore.Options{}), testKeys(t))
	code, body := get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "noeviction") {
		t.Fatalf("/readyz = %d %q, want 503 naming noeviction", code, body)
	}
	if strings.Contains(body, srv.Addr) {
		t.Fatalf("/readyz leaks the Redis address: %q", body)
	}
}

func TestConnectionAndBacklogSettingsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		max   int
		every time.Duration
		want  string
	}{
		{0, 0, "max connections"},
		{-5, 0, "max connections"},
		{1, -time.Second, "backlog sample interval"},
	} {
		c := Defaults()
		c.MaxConnections, c.BacklogEvery = tc.max, tc.every
		if _, err := New(t.Context(), c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d connections, backlog every %v: %v", tc.max, tc.every, err)
		}
	}
	c := Defaults()
	c.MaxNamespaces = 0
	if _, err := New(t.Context(), c); err == nil || !strings.Contains(err.Error(), "max namespaces") {
		t.Errorf("0 namespaces: %v", err)
	}
	for _, n := range []int{-1, outbox.HardMaxEndpoints + 1} {
		c = Defaults()
		c.MaxEndpoints = n
		if _, err := New(t.Context(), c); err == nil || !strings.Contains(err.Error(), "max endpoints") {
			t.Errorf("%d endpoints: %v", n, err)
		}
	}
	c = Defaults()
	c.BacklogEvery, c.Logger = 0, slog.New(slog.DiscardHandler)
	a, err := New(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.backlog != nil {
		t.Error("a zero backlog interval still samples")
	}
}

// /metrics says which relay answers: relay_build_info, 1, labelled with
// this binary's version, commit and Go version.
func TestMetricsCarryTheBuild(t *testing.T) {
	c := Defaults()
	c.Logger = slog.New(slog.DiscardHandler)
	a, err := New(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	code, body := get(t, a.Handler(), "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	b := buildinfo.Read()
	want := fmt.Sprintf("\nrelay_build_info{commit=%q,go_version=%q,version=%q} 1\n", b.Commit, b.GoVersion, b.Version)
	if !strings.Contains(body, want) {
		t.Fatalf("/metrics lacks %q:\n%s", strings.TrimSpace(want), body)
	}
}
