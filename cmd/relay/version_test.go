package main

import (
	"bytes"
	"log/slog"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/buildinfo"
	"github.com/hookrelay/relay/internal/relaytest"
)

// relay version, -version and --version print one line: the version, the
// commit and the Go version the binary was built with.
func TestVersionPrintsTheBuild(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		out, err := exec.Command(relaytest.Binary(t), args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		line := string(out)
		if strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, "relay ") ||
			!strings.Contains(line, "(commit ") || !strings.HasSuffix(line, ", "+runtime.Version()+")\n") {
			t.Errorf("%v printed %q, want relay VERSION (commit COMMIT, %s)", args, line, runtime.Version())
		}
	}
}

func TestVersionTakesNoArguments(t *testing.T) {
	var stdout bytes.Buffer
	err := run(t.Context(), []string{"version", "extra"}, slog.New(slog.DiscardHandler), &stdout)
	if err == nil || !strings.Contains(err.Error(), "relay version takes flags only") {
		t.Fatalf("run = %v", err)
	}
	if stdout.Len() != 0 {
		t.Fatalf("printed %q", stdout.String())
	}
	stdout.Reset()
	if err := run(t.Context(), []string{"--version"}, slog.New(slog.DiscardHandler), &stdout); err != nil {
		t.Fatal(err)
	}
	if want := buildinfo.Read().String() + "\n"; stdout.String() != want {
		t.Fatalf("printed %q, want %q", stdout.String(), want)
	}
}
