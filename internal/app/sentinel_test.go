package app

import (
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

func TestSentinelURLsParse(t *testing.T) {
	for _, tc := range []struct {
		url, user, pass, master string
		addrs                   []string
		db                      int
		tls                     bool
	}{
		{"redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster", "", "", "mymaster", []string{"127.0.0.1:26379", "127.0.0.1:26380"}, 0, false},
		{"redis+sentinel://relay:s3cret@s1.example.com,s2.example.com:26380/relay-main/2", "relay", "s3cret", "relay-main", []string{"s1.example.com:26379", "s2.example.com:26380"}, 2, false},
		{"rediss+sentinel://:p%40ss%2Fw@[::1]:26379,[::1]/m/", "", "p@ss/w", "m", []string{"[::1]:26379", "[::1]:26379"}, 0, true},
		{"REDIS+SENTINEL://h/m%20x", "", "", "m x", []string{"h:26379"}, 0, false},
	} {
		o, err := parseSentinelURL(tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if o.Username != tc.user || o.Password != tc.pass || o.MasterName != tc.master || o.DB != tc.db ||
			!reflect.DeepEqual(o.SentinelAddrs, tc.addrs) || (o.TLSConfig != nil) != tc.tls {
			t.Errorf("%s: user %q, password set %v, master %q, db %d, sentinels %v, TLS %v", tc.url, o.Username, o.Password != "", o.MasterName, o.DB, o.SentinelAddrs, o.TLSConfig != nil)
		}
	}
}

// Every malformed Sentinel URL is refused, saying which rule it broke,
// and no message quotes the password or a host.
func TestMalformedSentinelURLsAreRefusedWithoutTheirSecrets(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const secret = "Zq8KvWm3Jx"
	for _, tc := range []struct{ url, want string }{
		{"redis+sentinel:" + secret + "@sentinel.internal:26379/m", "//"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:26379", "names no master"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:26379/", "names no master"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:26379/m/x", "database"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:26379/m/-1", "database"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:26379/m/0/more", "nothing more"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:port/m", "Sentinel 1 has a port"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:26379,sentinel.internal:99999/m", "Sentinel 2 has a port"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:26379,,x:1/m", "Sentinel 2 is empty"},
		{"redis+sentinel://:" + secret + "@:26379/m", "Sentinel 1 has no host"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:26379/m?password=" + secret, "no query"},
		{"redis+sentinel://:" + secret + "/x@sentinel.internal:26379/m", "percent-encode"},
		{"redis+sentinel://:" + secret + "%zz@sentinel.internal:26379/m", "%25"},
		{"redis+sentinel://:" + secret + "@sentinel.internal:26379/m%zz", "master name"},
	} {
		c, closeFn, err := Connect(tc.url, log)
		if err == nil {
			closeFn()
			_ = c
			t.Errorf("%s accepted", tc.url)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", tc.url, err, tc.want)
		}
		for _, f := range append(redistest.Fragments(secret), "internal") {
			if strings.Contains(err.Error(), f) {
				t.Errorf("%s: the error quotes %q: %v", tc.url, f, err)
				break
			}
		}
	}
}

// A Sentinel URL makes a failover client: a *redis.Client whose master
// the Sentinels name.
func TestConnectMakesAFailoverClientForASentinelURL(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, closeFn, err := Connect("redis+sentinel://relay:s3cret@127.0.0.1:1,127.0.0.1:2/mymaster/3", log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	o := c.(*redis.Client).Options()
	if o.Username != "relay" || o.Password != "s3cret" || o.DB != 3 || o.Addr != "FailoverClient" {
		t.Errorf("failover client: user %q, password set %v, db %d, addr %q", o.Username, o.Password != "", o.DB, o.Addr)
	}
}
