package buildinfo

import (
	"regexp"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGet(t *testing.T) {
	tests := []struct {
		name                  string
		version, commit, date string
		want                  Info
	}{
		{name: "stamped", version: "0.3.0", commit: "1a2b3c4d", date: "2026-05-01T12:00:00Z",
			want: Info{Version: "0.3.0", Commit: "1a2b3c4d", Date: "2026-05-01T12:00:00Z", Go: runtime.Version()}},
		// A test binary has no VCS settings: nothing to fall back on but
		// VERSION, which a plain build embeds.
		{name: "not stamped", want: Info{Version: Version(), Commit: Unknown, Date: Unknown, Go: runtime.Version()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Get(tt.version, tt.commit, tt.date))
		})
	}
	assert.Equal(t, "0.3.0 (commit 1a2b3c4d, built 2026-05-01T12:00:00Z, go1.2)",
		Info{Version: "0.3.0", Commit: "1a2b3c4d", Date: "2026-05-01T12:00:00Z", Go: "go1.2"}.String())
}

// TestVersion: VERSION is one semantic version with no "v" and no spaces,
// the form CHANGELOG.md's headings and the format marker use.
func TestVersion(t *testing.T) {
	assert.Regexp(t, regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`), Version())
}
