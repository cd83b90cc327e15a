package envflag

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestAVariableIsTheDefaultAndAMalformedOneFailsUnlessTheFlagIsGiven(t *testing.T) {
	t.Setenv("TEST_ENVFLAG_N", "7")
	t.Setenv("TEST_ENVFLAG_EVERY", "soon")
	define := func() (*Set, *int, *time.Duration) {
		s := New("test")
		var n int
		var every time.Duration
		s.IntFromEnv(&n, "n", "TEST_ENVFLAG_N", 1, "")
		s.DurationFromEnv(&every, "every", "TEST_ENVFLAG_EVERY", 15*time.Second, "")
		return s, &n, &every
	}
	s, _, _ := define()
	err := s.Parse(nil)
	if err == nil || err.Error() != `TEST_ENVFLAG_EVERY="soon" is not a duration such as 15s` {
		t.Fatalf("a malformed variable: %v", err)
	}
	s, n, every := define()
	if err := s.Parse([]string{"-every", "2s"}); err != nil || *n != 7 || *every != 2*time.Second {
		t.Fatalf("the flag overrides the malformed variable: %v, n %d, every %v", err, *n, *every)
	}
	if err := New("test").Parse([]string{"stray"}); err == nil || strings.Contains(err.Error(), "stray") ||
		!strings.Contains(err.Error(), "test takes flags only, but 1 unexpected argument(s)") {
		t.Fatalf("a stray argument: %v", err)
	}
}

func TestAHiddenFlagNeverShowsItsVariableInTheUsage(t *testing.T) {
	const secret = "Zq8KvWm3Jx"
	t.Setenv("TEST_ENVFLAG_URL", "redis://:"+secret+"@127.0.0.1:6379")
	s := New("test")
	var url string
	s.HiddenFromEnv(&url, "redis", "TEST_ENVFLAG_URL", "the Redis URL")
	var usage bytes.Buffer
	s.SetOutput(&usage)
	s.PrintDefaults()
	if strings.Contains(usage.String(), secret) || !strings.Contains(usage.String(), "-redis") {
		t.Fatalf("usage: %q", usage.String())
	}
	if err := s.Parse(nil); err != nil || !strings.Contains(url, secret) || s.Given("redis") {
		t.Fatalf("from the variable: %v, given %v", err, s.Given("redis"))
	}
	if err := s.Parse([]string{"-redis", ""}); err != nil || url != "" || !s.Given("redis") {
		t.Fatalf("given on the command line: %v %q", err, url)
	}
}
