package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestReadyWhenTheStoreAnswersAndCannotEvict(t *testing.T) {
	h := routes(redistest.Miniredis(t))
	if code, body := get(t, h, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, h, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz = %d %q", code, body)
	}
}

func TestNotReadyOnARedisThatMayEvictRows(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	h := routes(redistest.NewStore(t, srv.Client, redisstore.Options{}))
	code, body := get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "noeviction") {
		t.Fatalf("/readyz = %d %q, want 503 naming noeviction", code, body)
	}
	if strings.Contains(body, srv.Addr) {
		t.Fatalf("/readyz leaks the Redis address: %q", body)
	}
}

func TestUnknownCommandIsAClearError(t *testing.T) {
	_, err := parse([]string{"frobnicate"})
	if err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Fatalf("parse = %v", err)
	}
}
