package relaytest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/signing"
)

// PublicURL is the canonical origin relays under test are given: every
// webhook's audience and every API token's.
const PublicURL = "http://relay.test"

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// Main runs the tests of m and then removes the binary, if one was built. A
// package's TestMain calls it: os.Exit(relaytest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	return code
}

// Binary is the relay binary, built on the first call of the test process.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "relay-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "relay")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/hookrelay/relay/cmd/relay").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build relay: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// FreeAddr is a loopback address free when asked, for a relay process to
// listen on. Its port is below Linux's ephemeral range (32768 up): a port
// the kernel hands out (a client's, or a listener's on port 0) may be taken
// again before the relay binds it, one below the range only by another
// test's choice.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		port := 20000 + (int(b[0])<<8|int(b[1]))%12768
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
}

// Credentials are what the relays of one test share on a real Redis: the
// API's HS256 secret, an admin token it signs, and a webhook signing key.
type Credentials struct {
	Secret  string
	Token   string
	KeyFile string
}

// NewCredentials makes a fresh secret and signing key, and an admin token
// for subject.
func NewCredentials(t testing.TB, subject string) Credentials {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	c := Credentials{Secret: hex.EncodeToString(b[:])}
	key, err := signing.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := signing.EncodeKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	c.KeyFile = filepath.Join(t.TempDir(), "hook.pem")
	if err := os.WriteFile(c.KeyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Token, err = httpapi.MintHS256([]byte(c.Secret), PublicURL, "", httpapi.Principal{Subject: subject, Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Env is the environment of a relay on the Redis at redisURL (a URL or a
// Cluster's seeds) with these credentials, delivering to loopback
// receivers.
func (c Credentials) Env(redisURL string) []string {
	return []string{
		"RELAY_REDIS_URL=" + redisURL,
		"RELAY_JWT_SECRET=" + c.Secret,
		"RELAY_PUBLIC_URL=" + PublicURL,
		"RELAY_ALLOW_CIDRS=127.0.0.1/32",
		"RELAY_HOOK_KEY_FILE=" + c.KeyFile,
	}
}

// Tail is the last lines of s, as a failing test shows a long log.
func Tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
