package app

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// DefaultSentinelPort is where a Sentinel listens unless told.
const DefaultSentinelPort = "26379"

// isSentinelURL: a redis+sentinel:// or rediss+sentinel:// URL.
func isSentinelURL(addr string) bool {
	scheme, _, ok := strings.Cut(addr, "://")
	if !ok {
		scheme, _, _ = strings.Cut(addr, ":")
	}
	switch strings.ToLower(scheme) {
	case "redis+sentinel", "rediss+sentinel":
		return true
	}
	return false
}

// parseSentinelURL reads
//
//	redis+sentinel://[user:pass@]host1[:port],host2[:port]/mastername[/db]
//
// (rediss+sentinel:// for TLS to the Sentinels and the Redis servers), the
// form redis-py's redis-sentinel-url, redisvl and Prefect use. The user
// name and password authenticate to the master and its replicas; the
// Sentinels are asked without them. go-redis's own ParseFailoverURL puts
// the master's password in the query string instead, where relay's rules
// on credentials could not keep it out of messages. Errors quote no part
// of the URL: hosts are named by their position.
func parseSentinelURL(addr string) (*redis.FailoverOptions, error) {
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return nil, errors.New(`the Sentinel URL has no "//" after its scheme: write redis+sentinel://[user:pass@]host1:port,host2:port/mastername[/db]`)
	}
	o := &redis.FailoverOptions{}
	if strings.EqualFold(scheme, "rediss+sentinel") {
		// No ServerName: crypto/tls takes each connection's host name.
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, pass, _ := strings.Cut(rest[:at], ":")
		var err error
		if o.Username, err = url.PathUnescape(user); err != nil {
			return nil, errors.New("the Sentinel URL's user name holds a bad %-escape")
		}
		if o.Password, err = url.PathUnescape(pass); err != nil {
			return nil, errors.New("the Sentinel URL's password holds a bad %-escape")
		}
		rest = rest[at+1:]
	}
	if strings.ContainsAny(rest, "?#") {
		return nil, errors.New("the Sentinel URL takes no query or fragment: write redis+sentinel://[user:pass@]host1:port,host2:port/mastername[/db]")
	}
	hosts, path, _ := strings.Cut(rest, "/")
	for i, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, fmt.Errorf("the Sentinel URL's Sentinel %d is empty: list them as host1:port,host2:port", i+1)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// No port (or a bare IPv6 address in brackets).
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), DefaultSentinelPort
			if strings.ContainsAny(host, ":[]") && !strings.HasPrefix(h, "[") {
				return nil, fmt.Errorf("the Sentinel URL's Sentinel %d is not host or host:port", i+1)
			}
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("the Sentinel URL's Sentinel %d has a port that is not a number from 1 to 65535", i+1)
		}
		if host == "" {
			return nil, fmt.Errorf("the Sentinel URL's Sentinel %d has no host", i+1)
		}
		o.SentinelAddrs = append(o.SentinelAddrs, net.JoinHostPort(host, port))
	}
	parts := strings.Split(path, "/")
	if parts[0] == "" {
		return nil, errors.New("the Sentinel URL names no master: write redis+sentinel://host1:port,host2:port/mastername[/db]")
	}
	name, err := url.PathUnescape(parts[0])
	if err != nil || name == "" {
		return nil, errors.New("the Sentinel URL's master name holds a bad %-escape")
	}
	o.MasterName = name
	switch {
	case len(parts) == 1, len(parts) == 2 && parts[1] == "":
	case len(parts) == 2:
		db, err := strconv.Atoi(parts[1])
		if err != nil || db < 0 {
			return nil, errors.New("the Sentinel URL's database, after the master name, is not a number of 0 or more")
		}
		o.DB = db
	default:
		return nil, errors.New("the Sentinel URL's path is /mastername or /mastername/db, nothing more")
	}
	return o, nil
}
