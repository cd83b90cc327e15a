package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawConn is a client connection to the binary, read under a deadline so a
// server that neither answers nor closes fails the test.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, url string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(settle)); err != nil {
		t.Fatal(err)
	}
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

func (c *rawConn) roundTrip(t *testing.T, raw string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp
}

// wantClosed asserts the server sends nothing more on c and closes it.
func (c *rawConn) wantClosed(t *testing.T, after string) {
	t.Helper()
	b, err := c.r.ReadByte()
	switch {
	case err == nil:
		rest, _ := c.r.Peek(c.r.Buffered())
		t.Fatalf("after %s relay sent more: %q", after, string(b)+string(rest))
	case !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset"):
		t.Fatalf("after %s the connection stayed open: %v", after, err)
	}
}

const rawHealthz = "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"

// The binary as an attacker with no token meets it: connections over
// RELAY_MAX_CONNECTIONS are answered 503 and closed; on connections within
// it, a request framed both by length and by chunks is refused and its
// connection closed before the request smuggled in its body is answered,
// and a head over the cap is 431 and closed.
func TestServeRefusesConnectionsOverTheLimitSmugglingAndHugeHeads(t *testing.T) {
	const limit = 3
	p, _ := startRelay(t, []string{"RELAY_REDIS_URL=", "RELAY_MAX_CONNECTIONS=" + strconv.Itoa(limit)}, true)

	held := make([]*rawConn, limit)
	for i := range held {
		held[i] = dialRaw(t, p.url)
		if resp := held[i].roundTrip(t, rawHealthz); resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %d", i, resp.StatusCode)
		}
	}
	c := dialRaw(t, p.url)
	resp := c.roundTrip(t, rawHealthz)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("a connection over the limit: %d, Retry-After %q, close=%v", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close)
	}
	c.wantClosed(t, "the 503")

	body := "0\r\n\r\n" + rawHealthz
	resp = held[0].roundTrip(t, "POST /v1/namespaces/acme/outcomes HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\nTransfer-Encoding: chunked\r\n\r\n"+body+rawHealthz)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" || !resp.Close {
		t.Fatalf("smuggling request: %d %q close=%v", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Close)
	}
	held[0].wantClosed(t, "the smuggling request")

	resp = held[1].roundTrip(t, "GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Pad: "+strings.Repeat("p", 100<<10)+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 100 KiB header: %d, want 431", resp.StatusCode)
	}
	held[1].wantClosed(t, "the 431")
}

func TestMaxConnectionsMustBePositive(t *testing.T) {
	for _, args := range [][]string{{"-max-connections", "0"}, {"-max-connections", "-5"}} {
		if _, err := parse(args); err == nil || !strings.Contains(err.Error(), "max connections") {
			t.Errorf("%v: %v", args, err)
		}
	}
	t.Setenv("RELAY_MAX_CONNECTIONS", "many")
	if _, err := parse(nil); err == nil || !strings.Contains(err.Error(), "RELAY_MAX_CONNECTIONS") {
		t.Errorf("RELAY_MAX_CONNECTIONS=many: %v", err)
	}
	c, err := parse([]string{"-max-connections", "7"})
	if err != nil || c.maxConns != 7 {
		t.Errorf("the flag overrides a bad variable: %v, %d", err, c.maxConns)
	}
}
