package httpapi

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// trickleConn takes at most step bytes per write, then reports its
// deadline passed, as a socket does whose client reads a little at a time.
type trickleConn struct {
	net.Conn
	step      int
	got       []byte
	deadlines int
}

func (c *trickleConn) SetWriteDeadline(time.Time) error { c.deadlines++; return nil }

func (c *trickleConn) Write(p []byte) (int, error) {
	if c.step == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	n := min(c.step, len(p))
	c.got = append(c.got, p[:n]...)
	if n < len(p) {
		return n, os.ErrDeadlineExceeded
	}
	return n, nil
}

// The write stall bounds a write without progress, not a write: a client
// taking some bytes within each stall gets the whole answer; one taking
// none is cut at the first stall.
func TestAWriteThatProgressesIsNotCutByTheStall(t *testing.T) {
	l := &Listener{writeStall: time.Second}
	slow := &trickleConn{step: 3}
	c := &conn{Conn: slow, l: l}
	n, err := c.Write([]byte("HTTP/1.1 200 OK\r\n"))
	if n != 17 || err != nil || string(slow.got) != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("a slow reader: wrote %d %q, %v", n, slow.got, err)
	}
	if slow.deadlines != 6 {
		t.Errorf("%d deadlines set, want one before each of the 6 writes", slow.deadlines)
	}
	stopped := &trickleConn{}
	if n, err := (&conn{Conn: stopped, l: l}).Write([]byte("HTTP/1.1 200 OK\r\n")); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a client that stopped reading: wrote %d, %v", n, err)
	}
}
