package httpapi

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookrelay/relay/internal/clock"
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
	// DefaultWriteStall bounds how long a write to a client may go with
	// the client taking none of it. It matches the time a client has to
	// send a request head, so a slot costs a client that stops reading no
	// less effort to hold than one that stops sending.
	DefaultWriteStall = 10 * time.Second
	// DefaultHeadGrace is how long a new connection keeps its slot at the
	// limit while it has not sent a whole request head. A client sends
	// its request as soon as it connects, so a second is many round trips;
	// without it, connections that send nothing would hold every slot for
	// the 10 s a head may take.
	DefaultHeadGrace = time.Second
)

// NewServer is the HTTP server relay runs h on when h is served from ln:
// heads capped at MaxHeaderBytes, each phase of a request bounded in time,
// and every request, OPTIONS * included, passed to h, whose framing check
// finds each connection's watch through ln's ConnContext. Its ConnState
// tells ln which connections are idle; a caller that sets its own must
// call ln.ConnState too.
//
// There is no WriteTimeout: it would bound the handler's time as well as
// the client's, and cut a slow reader that is still reading. ln bounds
// each write instead, by how long it goes without progress.
func NewServer(h http.Handler, ln *Listener) *http.Server {
	return &http.Server{
		Handler:                      h,
		ConnContext:                  ln.ConnContext,
		ConnState:                    ln.ConnState,
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
	// WriteStall is the longest a write to a connection may wait with the
	// client taking none of it, DefaultWriteStall when zero; the
	// connection is closed then. A client reading slowly is not cut.
	WriteStall time.Duration
	// HeadGrace is how long a connection waiting for its first whole
	// request head keeps its slot at the limit, DefaultHeadGrace when
	// zero; past it, a new connection takes the slot.
	HeadGrace time.Duration
	// Clock dates connections for HeadGrace; the system clock when nil.
	Clock clock.Clock
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
// At the limit, a new connection takes the slot of the connection that has
// waited longest for its first whole request head, once it has waited
// HeadGrace: connections that send nothing must not keep out clients with
// a request to send, nor health checks. A connection that has sent a whole
// head is never closed so. Failing that, it takes the slot of the
// connection idle longest, as IdleTimeout would close it later: an idle
// keep-alive connection must not keep out a client with a request to send
// either (a client's request crossing the close is retried as after any
// idle close). With neither, a connection over the limit is answered at once,
// before it is read, with a 503 problem and Retry-After, then closed: a
// client or load balancer learns to retry or go elsewhere instead of
// hanging in the accept queue, and the connection never costs a header
// buffer. When even the answers are too many at once, further connections
// are closed unanswered.
type Listener struct {
	net.Listener
	slots      chan struct{}
	refusing   chan struct{}
	metrics    *Metrics
	writeStall time.Duration
	headGrace  time.Duration
	clock      clock.Clock

	mu sync.Mutex
	// waiting holds the connections that have not sent a whole request
	// head yet, oldest first; idle holds the idle connections, longest
	// idle first.
	waiting, idle list.List
}

// NewListener wraps inner.
func NewListener(inner net.Listener, cfg ListenerConfig) (*Listener, error) {
	if cfg.MaxConnections < 0 {
		return nil, fmt.Errorf("httpapi: max connections %d must not be negative", cfg.MaxConnections)
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.WriteStall < 0 {
		return nil, fmt.Errorf("httpapi: write stall %v must not be negative", cfg.WriteStall)
	}
	if cfg.WriteStall == 0 {
		cfg.WriteStall = DefaultWriteStall
	}
	if cfg.HeadGrace < 0 {
		return nil, fmt.Errorf("httpapi: head grace %v must not be negative", cfg.HeadGrace)
	}
	if cfg.HeadGrace == 0 {
		cfg.HeadGrace = DefaultHeadGrace
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	return &Listener{
		Listener:   inner,
		slots:      make(chan struct{}, cfg.MaxConnections),
		refusing:   make(chan struct{}, max(16, cfg.MaxConnections/8)),
		metrics:    cfg.Metrics,
		writeStall: cfg.WriteStall,
		headGrace:  cfg.HeadGrace,
		clock:      cfg.Clock,
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
		if l.takeSlot() {
			l.metrics.connOpened()
			return l.track(c), nil
		}
		l.metrics.connRefused()
		l.refuse(c)
	}
}

// track is c, holding the slot just taken, listed as waiting for its first
// request head.
func (l *Listener) track(c net.Conn) *conn {
	tc := &conn{Conn: c, l: l, acceptedAt: l.clock.Now()}
	l.mu.Lock()
	tc.waitingAt = l.waiting.PushBack(tc)
	l.mu.Unlock()
	return tc
}

// takeSlot takes a free slot, or the slot of a connection it closes: the
// one waiting longest for its first request head, past the grace, else the
// one idle longest.
func (l *Listener) takeSlot() bool {
	for {
		select {
		case l.slots <- struct{}{}:
			return true
		default:
		}
		c := l.evictable()
		if c == nil {
			return false
		}
		// Close frees the slot before it returns.
		_ = c.Close()
	}
}

// evictable takes off its list and returns the connection takeSlot closes,
// or nil when none may be.
func (l *Listener) evictable() *conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.waiting.Front(); e != nil {
		if c := e.Value.(*conn); l.clock.Now().Sub(c.acceptedAt) >= l.headGrace {
			l.waiting.Remove(e)
			c.waitingAt = nil
			return c
		}
	}
	if e := l.idle.Front(); e != nil {
		c := l.idle.Remove(e).(*conn)
		c.idleAt = nil
		return c
	}
	return nil
}

// headRead takes c off the waiting list: it has sent a whole request head.
func (l *Listener) headRead(c *conn) {
	l.mu.Lock()
	if c.waitingAt != nil {
		l.waiting.Remove(c.waitingAt)
		c.waitingAt = nil
	}
	l.mu.Unlock()
}

// ConnState follows which connections are idle, and which have had a
// request head read, for Accept to choose the connection it closes at the
// limit: serve with http.Server.ConnState calling it.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*conn)
	if !ok || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s != http.StateNew && c.waitingAt != nil {
		// net/http read a head (or gave up on one) before the watch saw
		// it end: the watch only ever lags.
		l.waiting.Remove(c.waitingAt)
		c.waitingAt = nil
	}
	switch {
	case s == http.StateIdle && c.idleAt == nil && !c.closed:
		c.idleAt = l.idle.PushBack(c)
	case s != http.StateIdle && c.idleAt != nil:
		l.idle.Remove(c.idleAt)
		c.idleAt = nil
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
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: %s\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n%s: %s\r\nRetry-After: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
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

// conn is an accepted connection: it holds a slot until closed, follows
// the framing of the requests read from it, and bounds each write.
type conn struct {
	net.Conn
	l          *Listener
	once       sync.Once
	framing    framing
	acceptedAt time.Time
	// headSeen is set once the first whole request head is read.
	headSeen atomic.Bool
	// waitingAt is its place in l.waiting until its first request head is
	// read; idleAt its place in l.idle while idle; closed is set once it is
	// closed, so it is never listed again. All are guarded by l.mu.
	waitingAt *list.Element
	idleAt    *list.Element
	closed    bool
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	// The connection leaves the waiting list before net/http is handed the
	// end of its first head, so one whose request is being served is never
	// closed as silent.
	if n > 0 && c.framing.observe(p[:n]) && !c.headSeen.Swap(true) {
		c.l.headRead(c)
	}
	return n, err
}

// Write writes p, with a deadline of the write stall from now that moves
// on whenever the client takes some of p: a client that stops reading is
// closed within the stall, one that reads slowly is not. net/http sets no
// write deadline of its own with WriteTimeout unset.
func (c *conn) Write(p []byte) (int, error) {
	done := 0
	for {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.l.writeStall)); err != nil {
			return done, err
		}
		n, err := c.Conn.Write(p[done:])
		done += n
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return done, err
		}
	}
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.closed = true
		if c.waitingAt != nil {
			c.l.waiting.Remove(c.waitingAt)
			c.waitingAt = nil
		}
		if c.idleAt != nil {
			c.l.idle.Remove(c.idleAt)
			c.idleAt = nil
		}
		c.l.mu.Unlock()
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
