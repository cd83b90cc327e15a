package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromReadsVersionCommitAndGoVersion(t *testing.T) {
	const rev = "096b681a1c3e5f7a9b0d2c4e6f8a0b1c3d5e7f9a"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{
			{Key: "-compiler", Value: "gc"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-07T05:00:00Z"},
			{Key: "vcs.modified", Value: modified},
		}
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want Info
		line string
	}{
		{
			"built from a tag",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/hookrelay/relay", Version: "v0.1.0"}, Settings: vcs("false")},
			Info{Version: "v0.1.0", Commit: rev, GoVersion: "go1.26.8"},
			"relay v0.1.0 (commit " + rev + ", go1.26.8)",
		},
		{
			"built after a tag, with changes",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20261207050000-096b681a1c3e+dirty"}, Settings: vcs("true")},
			Info{Version: "v0.1.1-0.20261207050000-096b681a1c3e+dirty", Commit: rev + "+dirty", GoVersion: "go1.26.8"},
			"relay v0.1.1-0.20261207050000-096b681a1c3e+dirty (commit " + rev + "+dirty, go1.26.8)",
		},
		{
			"go run, outside a repository",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			Info{Version: "(devel)", Commit: Unknown, GoVersion: "go1.26.8"},
			"relay (devel) (commit unknown, go1.26.8)",
		},
		{
			"no main module version",
			&debug.BuildInfo{GoVersion: "go1.26.8"},
			Info{Version: "(devel)", Commit: Unknown, GoVersion: "go1.26.8"},
			"relay (devel) (commit unknown, go1.26.8)",
		},
		{
			"no build info",
			nil,
			Info{Version: "(devel)", Commit: Unknown, GoVersion: runtime.Version()},
			"relay (devel) (commit unknown, " + runtime.Version() + ")",
		},
	} {
		got := From(tc.bi)
		if got != tc.want {
			t.Errorf("%s: From = %#v, want %#v", tc.name, got, tc.want)
		}
		if got.String() != tc.line {
			t.Errorf("%s: String = %q, want %q", tc.name, got.String(), tc.line)
		}
	}
}

// A test binary records its Go version, and nothing that would leave a
// label empty.
func TestReadNamesEveryField(t *testing.T) {
	info := Read()
	if info.Version == "" || info.Commit == "" || info.GoVersion != runtime.Version() {
		t.Fatalf("Read = %#v", info)
	}
}
