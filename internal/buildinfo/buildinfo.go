package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Unknown stands for what a binary does not say: the commit of one built
// outside a repository, or with -buildvcs=false.
const Unknown = "unknown"

// Info is one binary's build.
type Info struct {
	// Version is the module's: the tag (v0.1.0) when built from a tagged
	// commit, a pseudo-version (v0.1.1-0.20261207...-096b681a) after one,
	// "+dirty" when the tree had changes, and "(devel)" when the toolchain
	// could not tell (go run, go test, a build outside a repository).
	Version string
	// Commit is the repository's revision, "+dirty" when the tree had
	// uncommitted changes; Unknown when the build recorded none.
	Commit string
	// GoVersion is the toolchain's, e.g. go1.26.8.
	GoVersion string
}

// Read is this binary's build.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return From(bi)
}

// From is the build bi records; a nil bi (a binary built without module
// support) records only the running Go version.
func From(bi *debug.BuildInfo) Info {
	info := Info{Version: "(devel)", Commit: Unknown, GoVersion: runtime.Version()}
	if bi == nil {
		return info
	}
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	var revision string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision != "" {
		info.Commit = revision
		if modified {
			info.Commit += "+dirty"
		}
	}
	return info
}

// String is the line relay version prints.
func (i Info) String() string {
	return fmt.Sprintf("relay %s (commit %s, %s)", i.Version, i.Commit, i.GoVersion)
}
