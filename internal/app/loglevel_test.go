package app

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestLogLevelsAreReadAndCheckedByName(t *testing.T) {
	for in, want := range map[string]slog.Level{
		"": slog.LevelInfo, "info": slog.LevelInfo, "DEBUG": slog.LevelDebug, "Warn": slog.LevelWarn, "error": slog.LevelError,
	} {
		if got, err := ParseLogLevel(in); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"verbose", "warning", "info+2", "-4", " info"} {
		if _, err := ParseLogLevel(in); err == nil || !strings.Contains(err.Error(), "debug, info, warn or error") {
			t.Errorf("%q: %v, want an error naming the levels", in, err)
		}
	}
}

// A logger at warn drops info lines, also from loggers derived from it,
// and passes warnings and errors.
func TestAtLeastDropsTheLinesBelowItsLevel(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(AtLeast(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), slog.LevelWarn))
	derived := log.With("component", "api").WithGroup("g")
	log.Info("an info line")
	derived.Debug("a debug line")
	derived.Info("a derived info line")
	log.Warn("a warning")
	derived.Error("a derived error")
	out := buf.String()
	for _, dropped := range []string{"an info line", "a debug line", "a derived info line"} {
		if strings.Contains(out, dropped) {
			t.Errorf("%q was logged:\n%s", dropped, out)
		}
	}
	for _, kept := range []string{"a warning", "a derived error", "component=api"} {
		if !strings.Contains(out, kept) {
			t.Errorf("%q is missing:\n%s", kept, out)
		}
	}
}
