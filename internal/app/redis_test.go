package app

import (
	"io"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestConnectChoosesTheClientFromTheAddress(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		addr    string
		cluster bool
	}{
		{"redis://127.0.0.1:6379/0", false},
		{"127.0.0.1:7001, 127.0.0.1:7002", true},
		{"redis://user:secret@127.0.0.1:7001?addr=127.0.0.1:7002", true},
	} {
		c, closeFn, err := Connect(tc.addr, log)
		if err != nil {
			t.Fatalf("%s: %v", tc.addr, err)
		}
		_, isCluster := c.(*redis.ClusterClient)
		closeFn()
		if isCluster != tc.cluster {
			t.Errorf("%s: cluster client %v, want %v", tc.addr, isCluster, tc.cluster)
		}
	}
	if _, _, err := Connect("redis://127.0.0.1:notaport", log); err == nil {
		t.Error("a malformed URL was accepted")
	}
}

// Managed Redis: TLS (rediss://) and a username and password reach the
// client, for a single server and for a cluster alike.
func TestConnectTakesTLSAndCredentials(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	single, closeSingle, err := Connect("rediss://relay:s3cret@redis.example.com:6380/0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSingle()
	o := single.(*redis.Client).Options()
	if o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.example.com" || o.Username != "relay" || o.Password != "s3cret" {
		t.Errorf("single server: TLS %v, user %q, password set %v", o.TLSConfig, o.Username, o.Password != "")
	}
	cl, closeCluster, err := Connect("rediss://relay:s3cret@node1.example.com:6380?addr=node2.example.com:6380&addr=node3.example.com:6380", log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeCluster()
	co := cl.(*redis.ClusterClient).Options()
	if co.TLSConfig == nil || co.Username != "relay" || co.Password != "s3cret" || len(co.Addrs) != 3 {
		t.Errorf("cluster: TLS %v, user %q, password set %v, seeds %v", co.TLSConfig, co.Username, co.Password != "", co.Addrs)
	}
}
