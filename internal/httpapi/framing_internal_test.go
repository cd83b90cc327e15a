package httpapi

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The watch must split a stream into heads exactly where net/http does, fed
// in any pieces: in one read, or a byte at a time.
func TestFramingWatchFollowsHeadsAndBodies(t *testing.T) {
	get := "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
	both := "GET / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	post := func(body string) string {
		return "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	for _, tc := range []struct {
		name   string
		stream string
		want   []verdict
	}{
		{"bodiless", get + get, []verdict{framedByLength, framedByLength}},
		// A body that reads like a smuggled head is skipped as a body.
		{"body like a head", post("GET /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") + get, []verdict{framedByLength, framedByLength}},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n" + get, []verdict{framedByLength, framedByLength}},
		{"length then chunks", "POST /x HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get, []verdict{framedBoth}},
		{"chunks then length", "POST /x HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n" + get, []verdict{framedBoth}},
		{"HTTP/1.0, both", "POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", []verdict{framedBoth}},
		{"chunks alone", "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get, []verdict{unfollowed}},
		{"folded line", "GET / HTTP/1.1\r\nX-A: b\r\n c\r\n\r\n" + get, []verdict{unfollowed}},
		{"bad length", "POST /x HTTP/1.1\r\nContent-Length: +5\r\n\r\n", []verdict{unfollowed}},
		{"two lengths", "POST /x HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", []verdict{unfollowed}},
		{"padded length", "POST /x HTTP/1.1\r\nContent-Length: " + strings.Repeat(" ", 80) + "0\r\n\r\n", []verdict{unfollowed}},
		// 35 bytes with its CR: within what the watch keeps, however read.
		{"padded length that fits", "POST /x HTTP/1.1\r\nContent-Length:" + strings.Repeat(" ", 17) + "5\r\n\r\nhello" + get, []verdict{framedByLength, framedByLength}},
		{"longest kept line", "POST /x HTTP/1.1\r\nContent-Length:" + strings.Repeat(" ", lineKeep-17) + "5\r\n\r\nhello" + get, []verdict{framedByLength, framedByLength}},
		{"a byte over the kept line", "POST /x HTTP/1.1\r\nContent-Length:" + strings.Repeat(" ", lineKeep-16) + "5\r\n\r\nhello" + get, []verdict{unfollowed}},
		// net/http skips up to four CR or LF bytes after a POST's body, and
		// refuses and closes where it does not: the watch skips blank lines
		// before a request line, and stays in step either way.
		{"blank line after a body", post("hello") + "\r\n" + both, []verdict{framedByLength, framedBoth}},
		{"blank lines after a body", post("hello") + "\n\r\n" + both, []verdict{framedByLength, framedBoth}},
		{"bare CRs after a body", post("hello") + "\r\r\n" + both, []verdict{framedByLength, framedBoth}},
		{"blank line after a bodiless head", get + "\r\n" + get, []verdict{framedByLength, framedByLength}},
		{"no request line", "\r\n" + get, []verdict{framedByLength}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, piece := range []int{len(tc.stream), 1, 7} {
				var f framing
				for s := tc.stream; s != ""; {
					n := min(piece, len(s))
					f.observe([]byte(s[:n]))
					s = s[n:]
				}
				if !slices.Equal(f.heads, tc.want) {
					t.Fatalf("read in pieces of %d: verdicts %v, want %v", piece, f.heads, tc.want)
				}
				for range tc.want {
					f.take()
				}
				if v := f.take(); v != unfollowed {
					t.Fatalf("a request the watch did not see end: %v, want unfollowed", v)
				}
			}
		})
	}
}

// The watch says which read ended a head, for the Listener to stop
// counting the connection as silent before net/http is handed that head.
func TestTheWatchSaysWhichReadEndedAHead(t *testing.T) {
	var f framing
	for _, step := range []struct {
		read  string
		ended bool
	}{
		{"\r\n", false},
		{"POST /x HTTP/1.1\r\nHost: a\r\n", false},
		{"Content-Length: 5\r\n", false},
		{"\r", false},
		{"\n", true},
		{"hel", false},
		{"lo", false},
		{"GET / HTTP/1.1\r\n\r\nGET", true},
	} {
		if got := f.observe([]byte(step.read)); got != step.ended {
			t.Fatalf("after %q: ended %v, want %v", step.read, got, step.ended)
		}
	}
}
