package release

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []Entry
		wantErr string
	}{
		{name: "unreleased over released", text: "# Changelog\n\n## 0.2.0 (unreleased)\n\n### Fixed\n\n## 0.1.0 (2026-12-06, commit 2817901)\n",
			want: []Entry{{Version: "0.2.0"}, {Version: "0.1.0", Date: "2026-12-06", Commit: "2817901"}}},
		{name: "all released", text: "## 1.0.0 (2027-01-02, commit abcdef0123)\n## 0.9.1 (2026-12-30, commit 1234567)\n",
			want: []Entry{{Version: "1.0.0", Date: "2027-01-02", Commit: "abcdef0123"}, {Version: "0.9.1", Date: "2026-12-30", Commit: "1234567"}}},
		{name: "prerelease", text: "## 0.3.0-rc.1 (unreleased)\n## 0.2.0 (2027-01-02, commit 1234567)\n",
			want: []Entry{{Version: "0.3.0-rc.1"}, {Version: "0.2.0", Date: "2027-01-02", Commit: "1234567"}}},
		{name: "old unreleased heading", text: "## Unreleased\n", wantErr: `"## Unreleased" is not`},
		{name: "v prefix", text: "## v0.2.0 (unreleased)\n", wantErr: "not a semantic version"},
		{name: "released without commit", text: "## 0.2.0 (unreleased)\n## 0.1.0 (2026-12-06)\n", wantErr: `release 0.1.0 says "2026-12-06"`},
		{name: "two unreleased", text: "## 0.3.0 (unreleased)\n## 0.2.0 (unreleased)\n", wantErr: "0.2.0 is unreleased but not the newest"},
		{name: "out of order", text: "## 0.1.0 (unreleased)\n## 0.2.0 (2026-12-06, commit 2817901)\n", wantErr: "0.2.0 is not older than 0.1.0"},
		{name: "no headings", text: "# Changelog\n", wantErr: "no release headings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.text))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestChangelogMatchesVersion: the newest heading of CHANGELOG.md is the
// release VERSION says this tree is, and every release before it names
// the commit it was cut from, which this clone has.
func TestChangelogMatchesVersion(t *testing.T) {
	root, err := tofutest.RepoRoot()
	require.NoError(t, err)
	es, err := Read(root)
	require.NoError(t, err)
	assert.Equal(t, buildinfo.Version(), es[0].Version, "internal/buildinfo/VERSION and CHANGELOG.md's newest heading are bumped together")
	for _, e := range es[1:] {
		require.True(t, e.Released(), "%s", e.Version)
		_, err := git(root, "rev-parse", "--verify", "--quiet", e.Commit+"^{commit}")
		assert.NoError(t, err, "release %s names commit %s, which this clone lacks", e.Version, e.Commit)
	}

	v, commit, err := Previous(root)
	require.NoError(t, err)
	assert.Equal(t, es[1].Version, v)
	assert.Equal(t, es[1].Commit, commit)
}
