package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// Prefix is where the console is served.
const Prefix = "/console/"

// CSP allows the console's own files and the API on the same origin, and
// nothing inline: a token in sessionStorage is only as safe as the scripts
// that can read it.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

//go:embed static
var embedded embed.FS

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

type file struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the console at Prefix, and redirects the bare /console
// there, and relay's root, /, which a browser opens first. Only the embedded files are served, each read once at start.
func Handler() http.Handler {
	files := map[string]file{}
	static, err := fs.Sub(embedded, "static")
	if err != nil {
		panic(err) // the embed names static; a build without it does not compile
	}
	err = fs.WalkDir(static, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ctype, ok := contentTypes[path.Ext(name)]
		if !ok {
			return nil // a file of a type the console does not serve
		}
		body, err := fs.ReadFile(static, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		files[name] = file{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return &handler{files: files}
}

type handler struct{ files map[string]file }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == strings.TrimSuffix(Prefix, "/") || r.URL.Path == "/" {
		// The fragment, which may carry a token, stays in the browser: a
		// redirect keeps it without the server seeing it.
		to := Prefix
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		// The root is found (302), not moved for good: relay may serve
		// something else there one day, and a browser would not ask again.
		code := http.StatusFound
		if r.URL.Path != "/" {
			code = http.StatusMovedPermanently
		}
		http.Redirect(w, r, to, code)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		notFound(w)
		return
	}
	if name == "" {
		name = "index.html"
	}
	f, ok := h.files[name]
	if !ok {
		notFound(w)
		return
	}
	// Names carry no hash: a browser revalidates each time, cheaply by
	// ETag, so a new relay's console is never mixed with an old one's.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Type", f.ctype)
	hd.Set("ETag", f.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}

func notFound(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "no such console file", http.StatusNotFound)
}

// Link is the console's address at base (relay's public URL) carrying
// token in the fragment, which browsers never send to a server.
func Link(base, token string) string {
	return strings.TrimSuffix(base, "/") + Prefix + "#token=" + url.QueryEscape(token)
}
