package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

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

func TestConnectChoosesTheClientFromTheAddress(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		addr    string
		cluster bool
	}{
		{"redis://127.0.0.1:6379/0", false},
		{"127.0.0.1:7001, 127.0.0.1:7002", true},
		{"redis://user:secret@127.0.0.1:7001?addr=127.0.0.1:7002", true},
	} {
		c, closeFn, err := connect(tc.addr, log)
		if err != nil {
			t.Fatalf("%s: %v", tc.addr, err)
		}
		_, isCluster := c.(*redis.ClusterClient)
		closeFn()
		if isCluster != tc.cluster {
			t.Errorf("%s: cluster client %v, want %v", tc.addr, isCluster, tc.cluster)
		}
	}
	if _, _, err := connect("redis://127.0.0.1:notaport", log); err == nil {
		t.Error("a malformed URL was accepted")
	}
}
