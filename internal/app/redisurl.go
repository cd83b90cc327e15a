package app

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// The Redis address is the one setting that carries a secret inside a
// value relay must also report on: every error about it is worded so that
// no piece of the password can reach a message. A password that holds a
// URL delimiter is where parsers go wrong: url.Parse reads
// "redis://:pw/tail@host" as host ":pw" and path "/tail@host", then quotes
// those pieces as a bad port or database. So credentials are checked first,
// in relay's own words, and any error later is scrubbed of them as well.

// credentials is the part of addr that may hold a user name and password,
// as a person would read it: after "://" (or from the start), up to the
// last '@'. Empty when addr has no '@'.
func credentials(addr string) string {
	rest := addr
	if _, after, ok := strings.Cut(addr, "://"); ok {
		rest = after
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return ""
	}
	return rest[:at]
}

// urlHosts is the host part of a URL addr, between its credentials and its
// path or query; empty when addr is not a URL. Credentials are checked
// first, so they hold none of "/?#".
func urlHosts(addr string) string {
	_, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	return rest
}

// missingSlashes reports a redis, rediss or unix URL without "//" after
// its scheme. url.Parse reads "redis:pass@host:6380/2" as opaque, with no
// host, user or path, and go-redis then connects to localhost:6379, db 0,
// without the password: a silent wrong server, not an error.
func missingSlashes(addr string) bool {
	scheme, rest, ok := strings.Cut(addr, ":")
	if !ok {
		return false
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel":
		return !strings.HasPrefix(rest, "//")
	}
	return false
}

// checkCredentials refuses credentials a URL parser would not read as
// written. Its errors name the rule, never a character of the credentials.
func checkCredentials(userinfo string) error {
	if strings.ContainsAny(userinfo, "/?#") {
		return errors.New("the Redis URL's user name or password holds '/', '?' or '#', or an '@' follows its host: percent-encode them (%2F, %3F, %23, %40)")
	}
	for i := 0; i < len(userinfo); i++ {
		if userinfo[i] == '%' && (i+2 >= len(userinfo) || !isHex(userinfo[i+1]) || !isHex(userinfo[i+2])) {
			return errors.New("the Redis URL's user name or password holds a '%' that does not start a %-escape: write it as %25")
		}
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scrubber removes a Redis address's password, as written and as decoded,
// from errors: a last guard behind the wording of each message.
type scrubber struct{ secrets []string }

func newScrubber(addr string) scrubber {
	userinfo := credentials(addr)
	var s scrubber
	if userinfo == "" {
		return s
	}
	s.secrets = append(s.secrets, userinfo)
	if _, pw, ok := strings.Cut(userinfo, ":"); ok && pw != "" {
		s.secrets = append(s.secrets, pw)
		if d, err := url.PathUnescape(pw); err == nil && d != pw {
			s.secrets = append(s.secrets, d)
		}
	}
	return s
}

// scrub returns err with every secret replaced; nil stays nil, and the
// result still unwraps to err for errors.Is.
func (s scrubber) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	for _, secret := range s.secrets {
		clean = strings.ReplaceAll(clean, secret, "[redacted]")
	}
	if clean == msg {
		return err
	}
	return &scrubbed{msg: clean, err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// redactURLError drops the URL a *url.Error quotes: a Redis URL carries its
// password, and this error is printed at start.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("the URL does not parse: %w", ue.Err)
	}
	return err
}
