package outbound

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

const (
	defaultMaxConns         = 64
	defaultMaxResponseBytes = 64 << 10
	defaultUserAgent        = "relay"

	// DefaultPostDeadline bounds a Post whose context has no deadline: the
	// whole call, answer body included, which ResponseHeaderTimeout alone
	// does not (a receiver dripping its body would hold the call forever).
	// It is a backstop for callers that set none; the driver's per-call
	// deadline (default 5 s) is the real bound, and a deadline the caller
	// set, longer or shorter, is never overruled.
	DefaultPostDeadline = 30 * time.Second

	// Transport timeouts sit under the driver's per-call deadline, so a dead
	// address gives way to the next one within one call.
	// responseHeaderTimeout is a second backstop for the headers; below the
	// call's deadline it would silently overrule an operator who raised that
	// deadline for a slow receiver.
	dialTimeout           = 3 * time.Second
	tlsHandshakeTimeout   = 3 * time.Second
	responseHeaderTimeout = 30 * time.Second
	idleConnTimeout       = 90 * time.Second
	maxResponseHeaderSize = 64 << 10

	// MaxExcerptBytes is how much of a refusal's body Error.Excerpt keeps.
	MaxExcerptBytes = 256
)

// Prefixes whose addresses carry an IPv4 address that a translator or relay
// forwards to; see Channel.permit and embeddedIPv4.
var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")   // well-known NAT64 (RFC 6052): IPv4 in bits 96-127
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48") // local-use NAT64 (RFC 8215): IPv4 in bits 96-127
	sixToFour  = netip.MustParsePrefix("2002::/16")      // 6to4 (RFC 3056): IPv4 in bits 16-47
	teredo     = netip.MustParsePrefix("2001::/32")      // Teredo (RFC 4380): client IPv4 = bits 96-127 XOR 0xffffffff
)

// loopbacks is what "localhost" means (RFC 6761), answered without DNS so a
// resolver cannot point it elsewhere. IPv4 first: most local receivers
// listen there.
var loopbacks = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}

// ChannelOptions configures a Channel. The zero value is a usable production
// channel that reaches only public addresses over https.
type ChannelOptions struct {
	// Allow lists CIDRs an operator permits despite the guard (e.g.
	// 127.0.0.1/32 for a local receiver, 10.1.2.3/32 for an internal one).
	// An address is judged in its plain form: ::ffff:10.1.2.3 is 10.1.2.3.
	// An IPv6 address that carries an IPv4 one (NAT64, 6to4, Teredo) is
	// permitted only if that IPv4 address is too.
	//
	// An entry opens every port of its addresses to the endpoints of every
	// namespace: allowing 127.0.0.0/8 lets any tenant post to relay's own
	// API, a local Redis and whatever else listens on the host. Allow the
	// narrowest prefix that holds the receivers, ideally the /32 (or /128)
	// of a dedicated receiver host.
	Allow []netip.Prefix
	// MaxConns sizes the connection pool: the delivery concurrency (default 64).
	MaxConns int
	// MaxResponseBytes caps how much of a response body is read (default
	// 64 KiB); past it the connection is dropped rather than drained.
	MaxResponseBytes int64
	// UserAgent is sent unless the caller's header sets one (default "relay").
	UserAgent string

	// Test seams. lookup replaces DNS; dial replaces the socket dial and is
	// called only with an "ip:port" the guard accepted; roots replaces the
	// system CA pool; now is the clock for Retry-After dates; postDeadline
	// replaces DefaultPostDeadline.
	lookup       func(ctx context.Context, host string) ([]netip.Addr, error)
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
	roots        *x509.CertPool
	now          func() time.Time
	postDeadline time.Duration
}

// Channel posts webhooks to endpoints that registered them, which relay does
// not trust: it dials only addresses the SSRF guard permits, follows no
// redirect, takes no proxy from the environment and reads a bounded answer.
// It is safe for concurrent use.
type Channel struct {
	guard     *ssrf.Guardian
	transport *wire
	maxBody   int64
	userAgent string
	// postDeadline bounds a Post whose context has none.
	postDeadline time.Duration

	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	now    func() time.Time
}

// NewChannel builds a Channel with its own connection pool.
func NewChannel(opts ChannelOptions) (*Channel, error) {
	if opts.MaxConns < 0 {
		return nil, fmt.Errorf("outbound: MaxConns %d is negative", opts.MaxConns)
	}
	if opts.MaxResponseBytes < 0 {
		return nil, fmt.Errorf("outbound: MaxResponseBytes %d is negative", opts.MaxResponseBytes)
	}
	var allow4, allow6 []netip.Prefix
	for _, p := range opts.Allow {
		if !p.IsValid() {
			return nil, fmt.Errorf("outbound: allow-list prefix %q is not valid", p)
		}
		p = p.Masked()
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			// Addresses are unmapped before the guard sees them.
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		if p.Addr().Is4() {
			allow4 = append(allow4, p)
		} else {
			allow6 = append(allow6, p)
		}
	}
	c := &Channel{
		// Webhooks go to whatever port the endpoint names (ssrf allows only
		// 80 and 443 by default); the address, not the port, is the risk.
		guard: ssrf.New(
			ssrf.WithAnyPort(),
			ssrf.WithAllowedV4Prefixes(allow4...),
			ssrf.WithAllowedV6Prefixes(allow6...),
		),
		maxBody:      orDefault(opts.MaxResponseBytes, defaultMaxResponseBytes),
		userAgent:    opts.UserAgent,
		postDeadline: time.Duration(orDefault(int64(opts.postDeadline), int64(DefaultPostDeadline))),
		lookup:       opts.lookup,
		dial:         opts.dial,
		now:          opts.now,
	}
	if c.userAgent == "" {
		c.userAgent = defaultUserAgent
	}
	if c.lookup == nil {
		c.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if c.dial == nil {
		// The guard again as the socket's Control: whatever reaches connect(2)
		// is checked, even if a future change skips the check in dialContext.
		d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second, Control: c.control}
		c.dial = d.DialContext
	}
	if c.now == nil {
		c.now = time.Now
	}
	maxConns := int(orDefault(int64(opts.MaxConns), defaultMaxConns))
	// HTTP/1.1 only: one request per connection keeps the pool sized by the
	// delivery concurrency, and a slow receiver cannot stall others' streams.
	// No proxy: one would dial for us, past the guard.
	c.transport = newWire(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: opts.roots}, c.dialContext, maxConns, c.maxBody)
	return c, nil
}

// orDefault reads an option's zero value as "use the default".
func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// CloseIdleConnections closes pooled connections; for shutdown.
func (c *Channel) CloseIdleConnections() { c.transport.closeIdle() }

// Post sends one request. nil means the endpoint answered 2xx; otherwise the
// error is an *Error. The call's deadline comes from ctx; without one, the
// call ends after DefaultPostDeadline. A 2xx whose body is still arriving at
// the deadline still acknowledges: the status is the answer.
func (c *Channel) Post(ctx context.Context, endpoint *url.URL, header http.Header, body []byte) error {
	_, err := c.PostStatus(ctx, endpoint, header, body)
	return err
}

// PostStatus is Post, with the 2xx status the endpoint answered: kept with
// the delivering attempt.
func (c *Channel) PostStatus(ctx context.Context, endpoint *url.URL, header http.Header, body []byte) (int, error) {
	if err := c.CheckURL(endpoint); err != nil {
		return 0, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.postDeadline)
		defer cancel()
	}
	req, err := c.newRequest(ctx, endpoint, header, body)
	if err != nil {
		return 0, err
	}
	ans, err := c.transport.post(ctx, req, body)
	if err != nil {
		return 0, transportError(ctx, err)
	}
	if ans.status >= 200 && ans.status < 300 {
		return ans.status, nil
	}
	var retryAfter time.Duration
	if ans.status == http.StatusTooManyRequests || ans.status == http.StatusServiceUnavailable {
		retryAfter = parseRetryAfter(ans.retryAfter, c.now())
	}
	// A refusal's first bytes are kept for the attempt row: what the
	// endpoint says is wrong. They are the only part of the body read for
	// its content, however long the body says it is.
	e := statusError(ans.status, retryAfter)
	e.Excerpt = ans.excerpt
	return 0, e
}

// newRequest is the POST of body to endpoint, as http.NewRequestWithContext
// makes it from the endpoint's text, with the caller's header and relay's
// User-Agent and Content-Type where the header sets none.
func (c *Channel) newRequest(ctx context.Context, endpoint *url.URL, header http.Header, body []byte) (*http.Request, error) {
	// The request takes the endpoint as parsed, not printed and parsed
	// again: copied into the request's own URL, so neither the transport
	// nor the caller sees the other's, without an empty port ("host:"), as
	// NewRequest has it.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "", bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Class: ClassURL, reason: "endpoint URL does not form a request"}
	}
	*req.URL = *endpoint
	req.URL.Host = strings.TrimSuffix(req.URL.Host, ":")
	req.Host = req.URL.Host
	// The caller's header is copied, never changed.
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header["User-Agent"] = []string{c.userAgent}
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header["Content-Type"] = []string{"application/json"}
	}
	return req, nil
}

// CheckURL applies the endpoint rules that need no DNS, for fast feedback at
// registration; Post applies them again. Names are checked at dial time, on
// every connection, against the addresses they resolve to then.
func (c *Channel) CheckURL(u *url.URL) error {
	bad := func(reason string) error { return &Error{Class: ClassURL, reason: reason} }
	if u == nil {
		return bad("no endpoint URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return bad("scheme must be https")
	}
	if u.User != nil {
		return bad("credentials in the URL are not allowed")
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no host")
	}
	if !validTarget(u.RequestURI()) {
		return bad(targetReason)
	}
	host := u.Hostname()
	if host == "" {
		return bad("no host")
	}
	// A port with a leading zero, a trailing dot and a non-canonical IPv6
	// literal give the origin a second spelling: refused, so the audience
	// relay signs (signing.Origin) is the one a receiver configures
	// (hookverify.Origin refuses the same forms).
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return bad("invalid port")
		}
		if p[0] == '0' {
			return bad("port has a leading zero")
		}
	}
	if strings.HasSuffix(host, ".") {
		return bad("host ends with '.'")
	}
	if strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil {
			return bad("host is not a valid IPv6 address")
		}
		if a.Zone() == "" && a.String() != strings.ToLower(host) {
			return bad("IPv6 address is not in its canonical form (as 2001:db8::1)")
		}
	}
	addrs, literal, err := literalAddrs(host)
	if err != nil {
		return err
	}
	if !literal {
		if u.Scheme != "https" {
			return bad("scheme must be https")
		}
		return nil
	}
	// An IP literal or localhost: the guard's verdict is known now. Plain
	// http is accepted only to a permitted loopback, where no one sits
	// between relay and the receiver.
	var permitted []netip.Addr
	for _, a := range addrs {
		if c.permit(a) == nil {
			permitted = append(permitted, a)
		}
	}
	if len(permitted) == 0 {
		return &Error{Class: ClassRefused, reason: errNotPermitted.Error()}
	}
	if u.Scheme == "http" {
		for _, a := range permitted {
			if !a.Unmap().IsLoopback() {
				return bad("scheme must be https")
			}
		}
	}
	return nil
}

// literalAddrs returns the addresses a host names without DNS: an IP literal
// or localhost. Hosts that only some parsers read as IPv4 ("127.1",
// "2130706433", "0x7f.1") are refused, so that the URL means one thing.
func literalAddrs(host string) (addrs []netip.Addr, literal bool, err error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return nil, true, &Error{Class: ClassURL, reason: "IPv6 zones are not allowed"}
		}
		return []netip.Addr{a}, true, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "localhost" {
		return loopbacks, true, nil
	}
	// The last label, without splitting the name: this runs on every call.
	if last := name[strings.LastIndexByte(name, '.')+1:]; numericLabel(last) {
		return nil, false, &Error{Class: ClassURL, reason: "host is neither a name nor a plain IP address"}
	}
	return nil, false, nil
}

// numericLabel reports whether a label is a number in the forms inet_aton
// and the WHATWG URL parser accept: decimal, octal or 0x hex. No top-level
// domain is numeric.
func numericLabel(s string) bool {
	if s == "" {
		return false
	}
	if len(s) > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		for _, r := range s[2:] {
			if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
				return false
			}
		}
		return true
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// permit is the guard's verdict on one address, judged in its plain form (an
// IPv4-mapped address is the IPv4 address it maps). The guard lets an
// allow-list entry override its deny rules, so when an operator allows a
// range holding NAT64, 6to4 or Teredo addresses (2000::/3 holds the last
// two), the IPv4 address inside is judged too: 64:ff9b::7f00:1 and
// 2002:7f00:1::1 must not reach 127.0.0.1 through a translator or relay.
func (c *Channel) permit(a netip.Addr) error {
	a = a.Unmap()
	if a.Zone() != "" {
		return errNotPermitted
	}
	if err := c.guard.SafeAddr(a); err != nil {
		return errNotPermitted
	}
	if v4, ok := embeddedIPv4(a); ok {
		if err := c.guard.SafeAddr(v4); err != nil {
			return errNotPermitted
		}
	}
	return nil
}

// embeddedIPv4 returns the IPv4 address that traffic to a is forwarded to
// by a NAT64 translator, a 6to4 relay or a Teredo relay.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a), nat64Local.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case teredo.Contains(a):
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

// control is the dialer's last check, on the exact address connect(2) gets.
func (c *Channel) control(network, address string, _ syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return errNotPermitted
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return errNotPermitted
	}
	return c.permit(ap.Addr())
}

// dialContext resolves the host itself and dials only addresses the guard
// permits, so the check is on the address actually dialed, on every new
// connection: a name that turns private after registration (DNS rebinding)
// is caught then. Refused addresses are skipped, not dialed.
func (c *Channel) dialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, errNotPermitted
	}
	addrs, literal, err := literalAddrs(host)
	if err != nil {
		return nil, err
	}
	if !literal {
		if addrs, err = c.lookup(ctx, host); err != nil {
			return nil, err
		}
		if len(addrs) == 0 {
			return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
		}
	}
	var firstErr error
	for _, a := range addrs {
		if c.permit(a) != nil {
			continue
		}
		a = a.Unmap()
		network := "tcp6"
		if a.Is4() {
			network = "tcp4"
		}
		conn, err := c.dial(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if firstErr == nil {
		return nil, errNotPermitted
	}
	return nil, firstErr
}
