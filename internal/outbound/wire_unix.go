//go:build unix

package outbound

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// peerOpen reports whether an idle connection is still open at the peer:
// no close and no bytes it was not asked for have arrived. It peeks
// without blocking, one system call; a connection it cannot look into
// counts as open, and a stale one then fails its next request before any
// answer, which post sends again on a new connection.
func peerOpen(conn net.Conn) bool {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := true
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0 || n == 0 && err == nil:
			open = false // unasked bytes, or the peer's close
		case err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR):
			open = false
		}
		return true
	})
	return open && err == nil
}
