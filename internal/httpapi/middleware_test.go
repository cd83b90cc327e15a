package httpapi_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/console"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/signing"
)

// echoID answers with the request id the context holds.
var echoID = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, httpapi.RequestID(r.Context()))
})

func TestASaneClientRequestIDIsKept(t *testing.T) {
	h := httpapi.AssignRequestID(echoID)
	for _, id := range []string{"a", "req-42_x.Y", strings.Repeat("z", 128)} {
		rec := call(h, http.MethodGet, "/", "X-Request-Id", id)
		if rec.Header().Get("X-Request-Id") != id || rec.Body.String() != id {
			t.Errorf("id %q: header %q, context %q", id, rec.Header().Get("X-Request-Id"), rec.Body)
		}
	}
}

func TestAMissingOrInsaneRequestIDIsReplaced(t *testing.T) {
	h := httpapi.AssignRequestID(echoID)
	generated := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for _, id := range []string{"", strings.Repeat("z", 129), "a b", "x\ny", "<script>", "ü", "a/b"} {
		rec := call(h, http.MethodGet, "/", "X-Request-Id", id)
		got := rec.Header().Get("X-Request-Id")
		if !generated.MatchString(got) || rec.Body.String() != got {
			t.Errorf("client id %q: header %q, context %q; want 32 hex digits in both", id, got, rec.Body)
		}
		if seen[got] {
			t.Errorf("id %q generated twice", got)
		}
		seen[got] = true
	}
}

func TestAPanicBecomesAnInternalProblemWithoutItsText(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&log, nil))
	h := httpapi.AssignRequestID(httpapi.AccessLog(logger)(httpapi.Recover(logger)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("db password is hunter2")
	}))))
	rec := call(h, http.MethodGet, "/boom")
	p := problemOf(t, rec, http.StatusInternalServerError, httpapi.SlugInternal)
	if strings.Contains(rec.Body.String(), "hunter2") || p.Detail != "" {
		t.Fatalf("the panic reached the client: %s", rec.Body)
	}
	// The operator gets the panic, its stack and the request id to find it.
	var lines []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(log.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("want a panic line and an access line, got %v", lines)
	}
	panicLine, access := lines[0], lines[1]
	if panicLine["panic"] != "db password is hunter2" || !strings.Contains(panicLine["stack"].(string), "middleware_test.go") || panicLine["request_id"] != p.RequestID {
		t.Fatalf("panic line %v", panicLine)
	}
	if access["status"] != float64(500) || access["request_id"] != p.RequestID {
		t.Fatalf("access line %v", access)
	}
}

func TestErrAbortHandlerIsRepanicked(t *testing.T) {
	h := httpapi.Recover(slog.New(slog.DiscardHandler))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
		}
	}()
	call(h, http.MethodGet, "/")
	t.Fatal("the abort was swallowed")
}

// After the status went out a problem cannot follow; the response is
// aborted so the client does not take a truncated body for a success.
func TestAPanicAfterTheHeaderAbortsTheResponse(t *testing.T) {
	h := httpapi.Recover(slog.New(slog.DiscardHandler))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"partial":`)
		panic("midway")
	}))
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
		}
	}()
	call(h, http.MethodGet, "/")
	t.Fatal("no abort")
}

// readBody is a handler that reads the whole body the way API handlers do
// and answers 413 when MaxBody cut it off.
var readBody = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if httpapi.IsTooLarge(err) {
		httpapi.WriteProblem(w, r, httpapi.NewProblem(httpapi.SlugBodyTooLarge, "over 16 bytes"))
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Write(b)
})

func TestMaxBodyAnswers413(t *testing.T) {
	h := httpapi.AssignRequestID(httpapi.MaxBody(16)(readBody))

	// A body at the cap passes.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("a", 16))))
	if rec.Code != http.StatusOK || rec.Body.Len() != 16 {
		t.Fatalf("16 bytes: %d %q", rec.Code, rec.Body)
	}

	// One byte more, declared or of unknown length, is cut off while the
	// handler reads it.
	for _, length := range []int64{17, -1} {
		req := httptest.NewRequest(http.MethodPost, "/", io.MultiReader(strings.NewReader(strings.Repeat("a", 10)), strings.NewReader(strings.Repeat("b", 7))))
		req.ContentLength = length
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		problemOf(t, rec, http.StatusRequestEntityTooLarge, httpapi.SlugBodyTooLarge)
	}
}

// Auth runs before any body is read, so an unauthenticated client learns
// nothing from the size check.
func TestAnOversizedUnauthenticatedRequestIs401(t *testing.T) {
	a := authFor(t, nil)
	r := chi.NewRouter()
	r.Use(httpapi.AssignRequestID, httpapi.MaxBody(16))
	r.With(a.Require(httpapi.ScopeOutcomesWrite)).Post("/v1/namespaces/{ns}/outcomes", readBody)
	body := strings.Repeat("a", 1<<10)
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/namespaces/acme/outcomes", strings.NewReader(body)))
	problemOf(t, rec, http.StatusUnauthorized, httpapi.SlugUnauthorized)

	req := httptest.NewRequest(http.MethodPost, "/v1/namespaces/acme/outcomes", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+hs(t, nil))
	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	problemOf(t, rec, http.StatusRequestEntityTooLarge, httpapi.SlugBodyTooLarge)
}

func TestIsTooLarge(t *testing.T) {
	if !httpapi.IsTooLarge(&http.MaxBytesError{Limit: 1}) {
		t.Fatal("MaxBytesError not recognised")
	}
	if !httpapi.IsTooLarge(errors.Join(errors.New("decode"), &http.MaxBytesError{Limit: 1})) {
		t.Fatal("wrapped MaxBytesError not recognised")
	}
	for _, err := range []error{nil, io.ErrUnexpectedEOF, errors.New("http: request body too large")} {
		if httpapi.IsTooLarge(err) {
			t.Fatalf("IsTooLarge(%v) = true", err)
		}
	}
}

func TestAccessLogHoldsNoSecretsOrBodies(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := chi.NewRouter()
	r.Use(httpapi.AssignRequestID, httpapi.AccessLog(logger), httpapi.Recover(logger))
	r.Post("/v1/namespaces/{ns}/outcomes", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"results":"RESPONSE-BODY-VALUE"}`)
	})
	req := httptest.NewRequest(http.MethodPost, "/v1/namespaces/acme/outcomes?token=QUERY-SECRET", strings.NewReader(`{"reservation_id":"REQUEST-BODY-VALUE"}`))
	req.Header.Set("Authorization", "Bearer AUTH-HEADER-VALUE")
	req.Header.Set("X-Request-Id", "trace-1")
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)

	out := log.String()
	for _, secret := range []string{"AUTH-HEADER-VALUE", "QUERY-SECRET", "REQUEST-BODY-VALUE", "RESPONSE-BODY-VALUE"} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds %s: %s", secret, out)
		}
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &line); err != nil {
		t.Fatalf("want one JSON line, got %q: %v", out, err)
	}
	want := map[string]any{
		"method":     "POST",
		"path":       "/v1/namespaces/acme/outcomes",
		"route":      "/v1/namespaces/{ns}/outcomes",
		"status":     float64(202),
		"bytes":      float64(len(`{"results":"RESPONSE-BODY-VALUE"}`)),
		"request_id": "trace-1",
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("log %s = %v, want %v", k, line[k], v)
		}
	}
	if _, ok := line["duration"]; !ok {
		t.Error("log has no duration")
	}
}

// An unauthenticated client chooses the method and path; the access log
// cuts both, at a character boundary, and says how long they were.
func TestAccessLogCutsWhatTheClientChose(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&log, nil))
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	h := newHarnessOn(t, redistest.NewStore(t, c, redisstore.Options{}), apiOptions{logger: logger})
	h.check = nil

	huge := strings.Repeat("M", 1<<20)
	path := "/v1/namespaces/" + strings.Repeat("é", 1<<19) + "/outcomes"
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(huge, path, nil)
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("x", 4<<10))
	h.h.ServeHTTP(rec, req)
	rec = httptest.NewRecorder()
	h.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))

	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want two access lines, got %d", len(lines))
	}
	for _, line := range lines {
		if len(line) > 2<<10 {
			t.Errorf("an access line of %d bytes: %.200s", len(line), line)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%.200s: %v", line, err)
		}
		p, _ := v["path"].(string)
		if !strings.HasPrefix(p, "/v1/namespaces/éé") || !strings.HasSuffix(p, fmt.Sprintf("…(%d bytes)", len(path))) || strings.ContainsRune(p, utf8.RuneError) {
			t.Errorf("logged path %q", p)
		}
	}
	var first map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	if method, _ := first["method"].(string); !strings.HasPrefix(method, "MMM") || !strings.HasSuffix(method, "…(1048576 bytes)") {
		t.Errorf("logged method %q", method)
	}
}

// No answer may be kept by a browser or proxy, problems and the routes
// without a token included, but the key list, cached for its rotation
// rule, and the console's files, revalidated by ETag.
func TestOnlyTheKeyListAndTheConsoleFilesMayBeKept(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := signing.NewPublicKey("relay-1", pub)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := signing.NewKeyList(key)
	if err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	st := redistest.NewStore(t, client, redisstore.Options{Prefix: redisstore.DefaultPrefix})
	h := newHarnessOn(t, st, apiOptions{ready: st.Check, configure: func(c *httpapi.Config) {
		c.Keys = signing.KeysHandler(keys)
		c.MetricsHandler = promhttp.Handler()
		c.Console = console.Handler()
	}})
	reader := "Bearer " + h.token("acme", httpapi.ScopeOutboxRead)
	for _, c := range []struct {
		method, path, auth string
		status             int
		cache              string
	}{
		{"GET", "/healthz", "", 200, "no-store"},
		{"GET", "/readyz", "", 200, "no-store"},
		{"GET", "/metrics", "", 200, "no-store"},
		{"GET", "/v1/namespaces/acme/endpoints", reader, 200, "no-store"},
		{"GET", "/v1/namespaces/acme/endpoints", "", 401, "no-store"},
		{"GET", "/v1/namespaces/acme/endpoints/none", reader, 404, "no-store"},
		{"GET", "/v1/namespaces/acme/outcomes?limit=%zz", reader, 400, "no-store"},
		{"PATCH", "/v1/namespaces/acme/endpoints/x", reader, 405, "no-store"},
		{"GET", "/nothing", "", 404, "no-store"},
		{"GET", "/.well-known/mkit-hook-keys.json", "", 200, "max-age=300"},
		{"GET", "/console/", "", 200, "no-cache"},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.h.ServeHTTP(rec, req)
		if rec.Code != c.status || rec.Header().Get("Cache-Control") != c.cache {
			t.Errorf("%s %s: %d with Cache-Control %q, want %d with %q", c.method, c.path, rec.Code, rec.Header().Get("Cache-Control"), c.status, c.cache)
		}
	}
}
