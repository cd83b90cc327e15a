package app

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

// A malformed Redis URL is reported without its password: url.Parse's
// error quotes the whole URL, and relay prints it to stderr.
func TestMalformedRedisURLHidesThePassword(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, addr := range []string{
		"redis://:hunter2@127.0.0.1:notaport",
		"redis://user:hunter2@127.0.0.1:6379/%zz",
		"redis://user:hunter2@127.0.0.1:notaport?addr=127.0.0.1:7002",
	} {
		_, _, err := Connect(addr, log)
		if err == nil {
			t.Fatalf("%s accepted", addr)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

// Behind the wording of each message, any error that still quotes the
// password, as written or decoded, has it replaced, and unwraps as before.
func TestScrubberReplacesThePasswordInAnyError(t *testing.T) {
	s := newScrubber("rediss://relay:Zq8Kv%2FWm3Jx@redis.example.com:6380/0")
	cause := errors.New("dial: refused")
	err := s.scrub(fmt.Errorf("AUTH Zq8Kv/Wm3Jx and Zq8Kv%%2FWm3Jx: %w", cause))
	if strings.Contains(err.Error(), "Zq8Kv") || !errors.Is(err, cause) {
		t.Fatalf("scrubbed %q, unwraps to the cause %v", err, errors.Is(err, cause))
	}
	if clean := errors.New("dial tcp 127.0.0.1:1: refused"); s.scrub(clean) != clean {
		t.Fatal("an error without the password was changed")
	}
}

// A Redis URL without "//" after its scheme is read by go-redis as opaque:
// it would connect to localhost:6379, db 0, with no password. It is
// refused, and the message quotes none of it.
func TestARedisURLWithoutSlashesIsRefused(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const secret = "Zq8KvWm3Jx"
	for _, addr := range []string{
		"redis:" + secret + "@redis.internal.example:6380/2",
		"redis::" + secret + "@redis.internal.example:6380/2",
		"rediss:relay:" + secret + "@redis.internal.example:6380/2",
		"REDIS:" + secret + "@redis.internal.example:6380/2",
		"redis:/:" + secret + "@redis.internal.example:6380/2",
		"unix:" + secret + "@/run/redis.sock",
	} {
		c, closeFn, err := Connect(addr, log)
		if err == nil {
			o := c.(*redis.Client).Options()
			closeFn()
			t.Fatalf("%s accepted: addr %q, db %d, password set %v", addr, o.Addr, o.DB, o.Password != "")
		}
		for _, f := range append(redistest.Fragments(secret), "internal", "redis.sock") {
			if strings.Contains(err.Error(), f) {
				t.Fatalf("%s: the error quotes %q: %v", addr, f, err)
			}
		}
		if !strings.Contains(err.Error(), "//") {
			t.Errorf("%s: the error does not say what is missing: %v", addr, err)
		}
	}
}

// A URL naming several hosts is not taken for one host name, which would
// fail only at its lookup: it is refused with the forms that do name a
// cluster's seeds, quoting nothing of it. A comma in a password is no host
// list.
func TestARedisURLNamingSeveralHostsIsRefusedNamingTheForms(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const secret = "Zq8KvWm3Jx"
	for _, addr := range []string{
		"redis://h1.internal:6379,h2.internal:6379",
		"redis://relay:" + secret + "@h1.internal:6379,h2.internal:6379/0",
		"rediss://h1.internal:6379,h2.internal:6379?addr=h3.internal:6379",
		"redis://:" + secret + "@h1.internal:6379,h2.internal:6379",
	} {
		c, closeFn, err := Connect(addr, log)
		if err == nil {
			closeFn()
			t.Fatalf("%s accepted as %T", addr, c)
		}
		for _, f := range append(redistest.Fragments(secret), "internal") {
			if strings.Contains(err.Error(), f) {
				t.Fatalf("%s: the error quotes %q: %v", addr, f, err)
			}
		}
		if !strings.Contains(err.Error(), "host1:port,host2:port") || !strings.Contains(err.Error(), "?addr=") {
			t.Errorf("%s: the error does not name the accepted forms: %v", addr, err)
		}
	}
	c, closeFn, err := Connect("redis://relay:a,b"+secret+"@127.0.0.1:6379/0", log)
	if err != nil {
		t.Fatalf("a password holding a comma: %v", err)
	}
	defer closeFn()
	if o := c.(*redis.Client).Options(); o.Addr != "127.0.0.1:6379" || o.Password != "a,b"+secret {
		t.Fatalf("a password holding a comma: addr %q, password as given %v", o.Addr, o.Password == "a,b"+secret)
	}
}
