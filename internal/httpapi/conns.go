package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Connection limits of the server relay runs the API on.
const (
	// MaxHeaderBytes caps a request's line and headers (net/http allows
	// 4 KiB more). A bearer token is at most MaxTokenBytes, so every
	// request relay can answer fits many times over; a larger head is
	// answered 431 by net/http and its connection closed.
	MaxHeaderBytes = 64 << 10
	// DefaultMaxConnections bounds the connections open at once when the
	// operator sets no limit.
	DefaultMaxConnections = 1024
)

// NewServer is the HTTP server relay runs h on when h is served from ln:
// heads capped at MaxHeaderBytes, each phase of a request bounded in time,
// and every request, OPTIONS * included, passed to h, whose framing check
// finds each connection's watch through ln's ConnContext.
func NewServer(h http.Handler, ln *Listener) *http.Server {
	return &http.Server{
		Handler:                      h,
		ConnContext:                  ln.ConnContext,
		DisableGeneralOptionsHandler: true,
		MaxHeaderBytes:               MaxHeaderBytes,
		ReadHeaderTimeout:            10 * time.Second,
		ReadTimeout:                  30 * time.Second,
		IdleTimeout:                  120 * time.Second,
	}
}

// refuseTimeout bounds the answer to a connection over the limit: time to
// take the 503 and close, not to send a request first.
const refuseTimeout = 2 * time.Second

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// MaxConnections is the most connections open at once,
	// DefaultMaxConnections when zero.
	MaxConnections int
	// Metrics counts open and refused connections; optional.
	Metrics *Metrics
}

// Listener is the listener relay serves the API on. It bounds the
// connections open at once, and watches how each request on them is framed
// so the API can refuse one that carries both Content-Length and
// Transfer-Encoding, which net/http would hide from it (serve with
// http.Server.ConnContext set to the Listener's ConnContext). It must see
// the bytes as the client sent them: plain HTTP/1.x, no TLS beneath it.
//
// A connection over the limit is answered at once, before it is read, with
// a 503 problem and Retry-After, then closed: a client or load balancer
// learns to retry or go elsewhere instead of hanging in the accept queue,
// and the connection never costs a header buffer. When even the answers
// are too many at once, further connections are closed unanswered.
type Listener struct {
	net.Listener
	slots    chan struct{}
	refusing chan struct{}
	metrics  *Metrics
}

// NewListener wraps inner.
func NewListener(inner net.Listener, cfg ListenerConfig) (*Listener, error) {
	if cfg.MaxConnections < 0 {
		return nil, fmt.Errorf("httpapi: max connections %d must not be negative", cfg.MaxConnections)
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	return &Listener{
		Listener: inner,
		slots:    make(chan struct{}, cfg.MaxConnections),
		refusing: make(chan struct{}, max(16, cfg.MaxConnections/8)),
		metrics:  cfg.Metrics,
	}, nil
}

// Accept returns the next connection within the limit; those over it are
// answered and closed here, never returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			l.metrics.connOpened()
			return &conn{Conn: c, l: l}, nil
		default:
			l.metrics.connRefused()
			l.refuse(c)
		}
	}
}

// ConnContext puts the connection's framing watch in the context of its
// requests, for the API's framing check.
func (l *Listener) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*conn); ok && fc.l == l {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// fullAnswer is the whole response to a connection over the limit.
func fullAnswer() []byte {
	id := newRequestID()
	body, _ := NewProblem(SlugUnavailable, "relay has as many connections open as it is configured to take; retry shortly").marshal(id)
	body = append(body, '\n')
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: %s\r\nX-Content-Type-Options: nosniff\r\n%s: %s\r\nRetry-After: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		ContentTypeProblem, HeaderRequestID, id, retryAfter[SlugUnavailable], len(body), body)
}

func (l *Listener) refuse(c net.Conn) {
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		_ = c.SetDeadline(time.Now().Add(refuseTimeout))
		if _, err := c.Write(fullAnswer()); err == nil {
			// Half-close and read what the client sent until it closes:
			// closing with its request unread would reset the connection,
			// and the client could lose the answer.
			if cw, ok := c.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(c, MaxHeaderBytes))
		}
		_ = c.Close()
	}()
}

type connKey struct{}

// conn is an accepted connection: it holds a slot until closed, and
// follows the framing of the requests read from it.
type conn struct {
	net.Conn
	l       *Listener
	once    sync.Once
	framing framing
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.framing.observe(p[:n])
	}
	return n, err
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		<-c.l.slots
		c.l.metrics.connClosed()
	})
	return err
}

// CloseWrite lets net/http half-close the connection as it would the TCP
// connection beneath.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
