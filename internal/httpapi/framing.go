package httpapi

import (
	"bytes"
	"net/http"
	"strconv"
	"sync"
)

// A request with both Content-Length and Transfer-Encoding is framed one
// way by a proxy that trusts the first and another by a server that trusts
// the second: what one takes for a body the other takes for the next
// request. net/http frames such a request by its chunks and deletes its
// Content-Length before a handler sees it, and keeps the connection open
// (RFC 9112 §6.1 asks to close it), so relay follows the request heads
// itself, on the bytes net/http reads, and refuses the request.

// verdict is what the framing watch says of one request head.
type verdict uint8

const (
	// framedByLength: framed by Content-Length, or bodiless; the watch
	// stays in step with net/http for the next request.
	framedByLength verdict = iota
	// framedBoth: Content-Length and Transfer-Encoding both; refused.
	framedBoth
	// unfollowed: chunked, or a head the watch cannot follow exactly; the
	// connection is closed after the answer, so no later request depends
	// on where the watch thinks it starts.
	unfollowed
)

// lineKeep is how much of a head line the watch keeps: enough for either
// framing header's name and any valid Content-Length.
const lineKeep = 64

// framing follows the request heads of one connection as net/http reads
// them: blank lines before a head are skipped, a head ends at its first
// empty line (a line ends at LF, a CR before it dropped), a Content-Length
// body is skipped, and after a head it cannot vouch for it stops, for that
// connection closes after the answer.
// It keeps a line prefix and a verdict per head not yet taken, never a
// whole head or body.
type framing struct {
	mu sync.Mutex
	// lost: the watch stopped; every later head is unfollowed.
	lost     bool
	bodyLeft int64
	// The head being read.
	line      []byte
	lineLong  bool
	lines     int
	length    int64
	hasLength bool
	chunked   bool
	doubtful  bool
	// ended counts the heads read in full.
	ended int
	// heads read in full whose requests a handler has not taken yet, in
	// order. net/http reads at most a buffer ahead of the request it
	// serves, so this stays short.
	heads []verdict
}

// observe takes the next bytes net/http read from the connection, and
// reports whether a request head ended within them.
func (f *framing) observe(p []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ended := f.ended
	for len(p) > 0 && !f.lost {
		if f.bodyLeft > 0 {
			n := min(f.bodyLeft, int64(len(p)))
			f.bodyLeft -= n
			p = p[n:]
			continue
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			f.keep(p)
			break
		}
		f.keep(p[:i])
		p = p[i+1:]
		f.endLine()
	}
	return f.ended != ended
}

// keep adds p to the line being read. The length is judged before p is
// kept, so a line is long for the same bytes however the reads split it.
func (f *framing) keep(p []byte) {
	if len(f.line)+len(p) > lineKeep {
		f.lineLong = true
	}
	if room := lineKeep - len(f.line); room > 0 {
		f.line = append(f.line, p[:min(room, len(p))]...)
	}
}

func (f *framing) endLine() {
	line, long := bytes.TrimSuffix(f.line, []byte{'\r'}), f.lineLong
	f.line, f.lineLong = f.line[:0], false
	f.lines++
	switch {
	case f.lines == 1 && !long && len(bytes.TrimLeft(line, "\r")) == 0:
		// A blank line before a request line: net/http skips up to four
		// CR or LF bytes after a POST, and refuses and closes the
		// connection on any other, so skipping every one keeps the watch
		// in step wherever the connection goes on.
		f.lines = 0
	case len(line) == 0 && !long:
		f.endHead()
	case f.lines == 1:
		// The request line; its method and target do not frame the body.
	case line[0] == ' ' || line[0] == '\t':
		// A folded line continues a value the watch may have judged.
		f.doubtful = true
	default:
		name, value, _ := bytes.Cut(line, []byte{':'})
		switch {
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			f.chunked = true
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseUint(string(bytes.Trim(value, " \t")), 10, 63)
			if long || err != nil || (f.hasLength && int64(n) != f.length) {
				// net/http refuses it too; the watch need not agree why.
				f.doubtful = true
			}
			f.length, f.hasLength = int64(n), true
		}
	}
}

func (f *framing) endHead() {
	f.ended++
	v := framedByLength
	switch {
	case f.chunked && f.hasLength:
		v = framedBoth
	case f.chunked || f.doubtful:
		v = unfollowed
	}
	f.heads = append(f.heads, v)
	if v != framedByLength {
		f.stop()
		return
	}
	f.bodyLeft = f.length
	f.lines, f.length, f.hasLength = 0, 0, false
}

func (f *framing) stop() {
	f.lost = true
	f.line = nil
}

// take is the verdict on the next request net/http serves: every request
// read from a connection reaches the handler in order, or the connection
// closes.
func (f *framing) take() verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.heads) == 0 {
		// Not a head the watch saw end; it cannot vouch for it.
		return unfollowed
	}
	v := f.heads[0]
	f.heads = f.heads[1:]
	return v
}

// checkFraming refuses a request whose head carried both Content-Length
// and Transfer-Encoding, and closes the connection after any request the
// framing watch could not follow. Without the watch (a server not on a
// Listener) it passes every request.
func checkFraming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := r.Context().Value(connKey{}).(*conn)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		switch c.framing.take() {
		case framedBoth:
			w.Header().Set("Connection", "close")
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "a request must not carry both Content-Length and Transfer-Encoding"))
			return
		case unfollowed:
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}
