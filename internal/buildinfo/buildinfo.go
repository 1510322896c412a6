// Package buildinfo describes the build of a RezusCloud binary: the version,
// commit and build date. The version is the release this source tree is, kept
// in the file VERSION beside this one and bumped with CHANGELOG.md (not a git
// tag), so that a plain `go build` in a clone says which release it is; the
// release task may still stamp another with -ldflags -X main.version. The
// commit and date come from -ldflags -X too, with the VCS data Go records as
// a fallback. The commands and the API's /version import it.
package buildinfo

import (
	_ "embed"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Unknown is shown for what neither the linker flags nor Go's build info say.
const Unknown = "unknown"

//go:embed VERSION
var versionFile string

// Version is the release this source tree is: the one line of VERSION.
func Version() string { return strings.TrimSpace(versionFile) }

// Info is one binary's build.
type Info struct {
	// Version is the release: what the linker stamped, else Version().
	Version string
	// Commit is the full git commit the binary was built from.
	Commit string
	// Date is when it was built, RFC 3339 in UTC.
	Date string
	// Go is the Go release it was built with.
	Go string
}

// Get returns the build of the running binary from what the linker stamped
// (empty strings when nothing was), falling back to VERSION for the version
// and to the vcs.revision and vcs.time Go records when it builds in a git
// work tree with -buildvcs.
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
		i.Version = Version()
	}
	if i.Commit == "" {
		i.Commit = Unknown
	}
	if i.Date == "" {
		i.Date = Unknown
	}
	return i
}

// String is "0.3.0 (commit 1a2b3c4, built 2026-05-01T12:00:00Z, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s)", i.Version, i.Commit, i.Date, i.Go)
}
