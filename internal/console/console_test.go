package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/console"
)

func get(t *testing.T, h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, "http://relay.test/", nil)
	// Set the path raw, as a client may send it: httptest would clean it.
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatal(err)
	}
	req.URL = u
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// checkHeaders holds for every console answer, a 404 and a redirect too.
func checkHeaders(t *testing.T, target string, w *httptest.ResponseRecorder) {
	t.Helper()
	for name, want := range map[string]string{
		"Content-Security-Policy": console.CSP,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := w.Header().Get(name); got != want {
			t.Errorf("%s: %s = %q, want %q", target, name, got, want)
		}
	}
}

func TestCSPIsStrict(t *testing.T) {
	for _, want := range []string{"default-src 'self'", "script-src 'self';", "style-src 'self';", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'", "object-src 'none'"} {
		if !strings.Contains(console.CSP+";", want) {
			t.Errorf("CSP %q lacks %q", console.CSP, want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(console.CSP, bad) {
			t.Errorf("CSP %q allows %q", console.CSP, bad)
		}
	}
}

func TestServesEmbeddedFiles(t *testing.T) {
	h := console.Handler()
	for target, ctype := range map[string]string{
		"/console/":            "text/html; charset=utf-8",
		"/console/index.html":  "text/html; charset=utf-8",
		"/console/console.css": "text/css; charset=utf-8",
		"/console/app.js":      "text/javascript; charset=utf-8",
		"/console/api.js":      "text/javascript; charset=utf-8",
		"/console/pages.js":    "text/javascript; charset=utf-8",
		"/console/dom.js":      "text/javascript; charset=utf-8",
		"/console/fmt.js":      "text/javascript; charset=utf-8",
		"/console/chart.js":    "text/javascript; charset=utf-8",
	} {
		w := get(t, h, http.MethodGet, target)
		if w.Code != http.StatusOK {
			t.Errorf("%s: status %d", target, w.Code)
			continue
		}
		checkHeaders(t, target, w)
		if got := w.Header().Get("Content-Type"); got != ctype {
			t.Errorf("%s: Content-Type %q, want %q", target, got, ctype)
		}
		if got := w.Header().Get("Cache-Control"); got != "no-cache" {
			t.Errorf("%s: Cache-Control %q, want no-cache", target, got)
		}
		if w.Body.Len() == 0 || w.Header().Get("ETag") == "" {
			t.Errorf("%s: empty body or no ETag", target)
		}
		// A revalidation with the ETag costs no body.
		again := get(t, h, http.MethodGet, target, "If-None-Match", w.Header().Get("ETag"))
		if again.Code != http.StatusNotModified {
			t.Errorf("%s: revalidation answered %d, want 304", target, again.Code)
		}
	}
	index := get(t, h, http.MethodGet, "/console/").Body.String()
	// The CSP forbids inline code; the page must not need any.
	for _, inline := range []string{"<style", " style=", "onclick=", "onload=", "javascript:"} {
		if strings.Contains(index, inline) {
			t.Errorf("index.html holds inline %q, which the CSP blocks", inline)
		}
	}
	if strings.Contains(index, "<script>") || strings.Contains(index, "http://") || strings.Contains(index, "https://") {
		t.Error("index.html holds an inline script or loads something from outside relay")
	}
}

func TestRedirectsBareConsole(t *testing.T) {
	h := console.Handler()
	w := get(t, h, http.MethodGet, "/console")
	if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/console/" {
		t.Fatalf("/console: %d to %q, want 301 to /console/", w.Code, w.Header().Get("Location"))
	}
	checkHeaders(t, "/console", w)
}

// relay's root leads a browser to the console, found (302) rather than
// moved for good, with its query; the fragment stays in the browser.
func TestRedirectsRoot(t *testing.T) {
	h := console.Handler()
	for target, want := range map[string]string{"/": "/console/", "/?x=1": "/console/?x=1"} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			w := get(t, h, method, target)
			if w.Code != http.StatusFound || w.Header().Get("Location") != want {
				t.Errorf("%s %s: %d to %q, want 302 to %q", method, target, w.Code, w.Header().Get("Location"), want)
			}
			checkHeaders(t, target, w)
		}
	}
}

func TestServesNothingElse(t *testing.T) {
	h := console.Handler()
	for _, target := range []string{
		"/console/missing.js",
		"/console/static/index.html",
		"/console/console.go",
		"/console/console_test.go",
		"/console/../go.mod",
		"/console/%2e%2e/console.go",
		"/console/..%2fconsole.go",
		"/console//index.html",
		"/console/./index.html",
		"/console/index.html/",
		"/console/.",
		"/consolex/index.html",
		"/index.html",
		"//",
		"/.",
	} {
		w := get(t, h, http.MethodGet, target)
		if w.Code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", target, w.Code)
		}
		checkHeaders(t, target, w)
	}
	w := get(t, h, http.MethodPost, "/console/")
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d, Allow %q", w.Code, w.Header().Get("Allow"))
	}
	checkHeaders(t, "POST /console/", w)
}

func TestLinkKeepsTokenInFragment(t *testing.T) {
	got := console.Link("https://relay.example.com/", "a.b+c")
	if want := "https://relay.example.com/console/#token=a.b%2Bc"; got != want {
		t.Fatalf("Link = %q, want %q", got, want)
	}
}
