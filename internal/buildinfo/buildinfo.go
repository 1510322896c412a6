// Package buildinfo describes the build of a RezusCloud binary: the version,
// commit and build date the release task stamps into each command's main
// package with -ldflags -X, with the VCS data Go records as a fallback for a
// plain `go build` in a clone. Only the commands import it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Unknown is shown for what neither the linker flags nor Go's build info say.
const Unknown = "unknown"

// Info is one binary's build.
type Info struct {
	// Version is the release (git describe), or "dev".
	Version string
	// Commit is the full git commit the binary was built from.
	Commit string
	// Date is when it was built, RFC 3339 in UTC.
	Date string
	// Go is the Go release it was built with.
	Go string
}

// Get returns the build of the running binary from what the linker stamped
// (empty strings when nothing was), falling back to the vcs.revision and
// vcs.time Go records when it builds in a git work tree with -buildvcs.
func Get(version, commit, date string) Info {
	i := Info{Version: version, Commit: commit, Date: date, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && i.Commit == "":
				i.Commit = s.Value
			case s.Key == "vcs.time" && i.Date == "":
				i.Date = s.Value
			}
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Commit == "" {
		i.Commit = Unknown
	}
	if i.Date == "" {
		i.Date = Unknown
	}
	return i
}

// String is "v0.3.0 (commit 1a2b3c4, built 2026-05-01T12:00:00Z, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s)", i.Version, i.Commit, i.Date, i.Go)
}
