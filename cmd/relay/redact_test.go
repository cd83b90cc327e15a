package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"
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
		_, _, err := connect(addr, log)
		if err == nil {
			t.Fatalf("%s accepted", addr)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}
