package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestBenchSchemeFlagTakesEveryRegisteredScheme(t *testing.T) {
	for _, scheme := range []string{"standard-webhooks", "standard-webhooks-v1a", "mkit-hook-v2"} {
		c, err := parseBench([]string{"-scheme", scheme})
		if err != nil {
			t.Errorf("-scheme %s: %v", scheme, err)
		} else if c.scheme != scheme {
			t.Errorf("-scheme %s read as %q", scheme, c.scheme)
		}
	}
	for _, scheme := range []string{"mkit-hook-v3", "standard-webhooks-v2", "v1a", ""} {
		if _, err := parseBench([]string{"-scheme", scheme}); err == nil {
			t.Errorf("-scheme %q: accepted", scheme)
		}
	}
}

// A v1a endpoint is registered without a key (relay makes its pair) and
// delivers like the others.
func TestBenchDeliversToStandardWebhooksV1aEndpoints(t *testing.T) {
	var out bytes.Buffer
	args := append([]string{"-redis", "", "-scheme", "standard-webhooks-v1a", "-phases", "e2e"}, smallBench...)
	if err := Main(context.Background(), args, slog.New(slog.NewTextHandler(io.Discard, nil)), &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "scheme=standard-webhooks-v1a ") {
		t.Errorf("the settings line should name the scheme:\n%s", out.String())
	}
	row, ok := benchTable(t, out.String())[phaseE2E]
	if !ok || row["errors"] != "0" || row["delivered"] != "300" {
		t.Errorf("e2e row %v, want 300 delivered and no error\n%s", row, out.String())
	}
}
