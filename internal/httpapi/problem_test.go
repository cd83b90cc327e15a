package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/httpapi"
)

// The table of the API decisions: each slug's status is part of the
// contract, as its type URI is.
func TestEverySlugHasItsStatusAndATitle(t *testing.T) {
	want := map[httpapi.Slug]int{
		"unauthorized": 401, "forbidden": 403, "not-found": 404, "method-not-allowed": 405,
		"invalid-request": 400, "invalid-outcome": 400, "invalid-endpoint": 400, "unsafe-url": 422,
		"body-too-large": 413, "unsupported-media-type": 415, "conflict": 409, "no-endpoint": 422,
		"too-many-endpoints": 422, "too-many-namespaces": 422, "endpoint-has-backlog": 409, "endpoint-deleting": 409,
		"endpoint-disabled": 409, "not-pending": 404, "still-pending": 409, "not-delivered": 409, "recovery-running": 409, "stream-busy": 409, "contended": 503,
		"unavailable": 503, "internal": 500, "cannot-mint": 409,
	}
	if got := httpapi.Slugs(); len(got) != len(want) {
		t.Fatalf("%d slugs, want %d: %v", len(got), len(want), got)
	}
	titles := map[string]httpapi.Slug{}
	for slug, status := range want {
		p := httpapi.NewProblem(slug, "")
		if p.Slug != slug || p.Status != status || slug.Status() != status {
			t.Errorf("%s: problem %+v, want status %d", slug, p, status)
		}
		if p.Title == "" || p.Title != slug.Title() {
			t.Errorf("%s: title %q", slug, p.Title)
		}
		if other, dup := titles[p.Title]; dup {
			t.Errorf("%s and %s share the title %q", slug, other, p.Title)
		}
		titles[p.Title] = slug
		if slug.Type() != "urn:hookrelay:problem:"+string(slug) {
			t.Errorf("%s: type %q", slug, slug.Type())
		}
	}
}

func withRequestID(id string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Request-Id", id)
	var out *http.Request
	httpapi.AssignRequestID(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { out = r })).ServeHTTP(httptest.NewRecorder(), r)
	return out
}

func decode(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return m
}

func TestWriteProblemWritesRFC9457WithTheRequestID(t *testing.T) {
	rec := httptest.NewRecorder()
	httpapi.WriteProblem(rec, withRequestID("req-1"), httpapi.NewProblem(httpapi.SlugInvalidRequest, "reservation_id is required"))
	if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	got := decode(t, rec)
	want := map[string]any{
		"type":       "urn:hookrelay:problem:invalid-request",
		"title":      "Invalid request",
		"status":     float64(400),
		"detail":     "reservation_id is required",
		"request_id": "req-1",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("body %v, want %v", got, want)
	}
	if rec.Header().Get("Retry-After") != "" {
		t.Fatal("Retry-After on a 400")
	}
	// The standard members come first, type leading, as readers expect.
	if !strings.HasPrefix(rec.Body.String(), `{"type":"urn:hookrelay:problem:invalid-request","title"`) {
		t.Fatalf("member order: %s", rec.Body)
	}
}

func TestRetryableProblemsSayWhenToRetry(t *testing.T) {
	for _, slug := range httpapi.Slugs() {
		rec := httptest.NewRecorder()
		httpapi.WriteProblem(rec, withRequestID("r"), httpapi.NewProblem(slug, ""))
		want := ""
		switch slug {
		case httpapi.SlugContended, httpapi.SlugStreamBusy:
			want = "1"
		case httpapi.SlugUnavailable:
			want = "2"
		}
		if got := rec.Header().Get("Retry-After"); got != want {
			t.Errorf("%s: Retry-After %q, want %q", slug, got, want)
		}
		if rec.Code != slug.Status() {
			t.Errorf("%s: status %d", slug, rec.Code)
		}
	}
}

func TestExtensionsAreMembersButCannotReplaceStandardOnes(t *testing.T) {
	p := httpapi.NewProblem(httpapi.SlugInvalidOutcome, "2 outcomes are invalid").
		With("errors", []map[string]any{{"index": 1, "detail": "kind is unknown"}}).
		With("status", 200).
		With("type", "about:blank").
		With("request_id", "forged")
	rec := httptest.NewRecorder()
	httpapi.WriteProblem(rec, withRequestID("real"), p)
	got := decode(t, rec)
	if got["status"] != float64(400) || got["type"] != "urn:hookrelay:problem:invalid-outcome" || got["request_id"] != "real" {
		t.Fatalf("an extension replaced a standard member: %v", got)
	}
	errs, _ := got["errors"].([]any)
	if len(errs) != 1 || fmt.Sprint(errs[0]) != "map[detail:kind is unknown index:1]" {
		t.Fatalf("errors extension %v", got["errors"])
	}
	if rec.Code != 400 {
		t.Fatalf("status %d", rec.Code)
	}
}

func TestAnUnencodableExtensionDoesNotLoseTheAnswer(t *testing.T) {
	rec := httptest.NewRecorder()
	httpapi.WriteProblem(rec, withRequestID("r"), httpapi.NewProblem(httpapi.SlugConflict, "taken").With("bad", math.Inf(1)))
	got := decode(t, rec)
	if rec.Code != 409 || got["type"] != "urn:hookrelay:problem:conflict" || got["detail"] != "taken" {
		t.Fatalf("%d %v", rec.Code, got)
	}
}

func TestUnknownSlugIsTheInternalProblem(t *testing.T) {
	p := httpapi.NewProblem("made-up", "secret detail")
	if p.Slug != httpapi.SlugInternal || p.Status != 500 || p.Detail != "" {
		t.Fatalf("%+v", p)
	}
	rec := httptest.NewRecorder()
	httpapi.WriteProblem(rec, withRequestID("r"), nil)
	if got := decode(t, rec); rec.Code != 500 || got["type"] != "urn:hookrelay:problem:internal" {
		t.Fatalf("nil problem: %d %v", rec.Code, got)
	}
}

func TestAProblemIsAnError(t *testing.T) {
	var err error = fmt.Errorf("put endpoint: %w", httpapi.NewProblem(httpapi.SlugUnsafeURL, "the URL resolves to a private address"))
	var p *httpapi.Problem
	if !errors.As(err, &p) || p.Status != 422 {
		t.Fatalf("errors.As: %v", err)
	}
	if !strings.Contains(err.Error(), "unsafe-url: the URL resolves") {
		t.Fatalf("text %q", err)
	}
}

func TestWriteJSON(t *testing.T) {
	rec := httptest.NewRecorder()
	httpapi.WriteJSON(rec, http.StatusAccepted, map[string]any{"results": []string{"a"}})
	if rec.Code != 202 || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != `{"results":["a"]}`+"\n" {
		t.Fatalf("%d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}

	// A value that cannot be encoded is the server's fault, said as such,
	// with the id the middleware put on the response.
	rec = httptest.NewRecorder()
	rec.Header().Set("X-Request-Id", "r-9")
	httpapi.WriteJSON(rec, http.StatusOK, map[string]any{"c": make(chan int)})
	if got := decode(t, rec); rec.Code != 500 || got["type"] != "urn:hookrelay:problem:internal" || got["request_id"] != "r-9" {
		t.Fatalf("%d %v", rec.Code, got)
	}
}

func TestRequestIDIsEmptyWithoutTheMiddleware(t *testing.T) {
	if id := httpapi.RequestID(context.Background()); id != "" {
		t.Fatalf("RequestID = %q", id)
	}
}
