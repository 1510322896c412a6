package main

import (
	"testing"

	"github.com/Masterminds/semver/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
)

// TestLevelReaders: every schema level this build writes has its first
// reader, readers rise with the levels, and none is newer than this build.
func TestLevelReaders(t *testing.T) {
	self := semver.MustParse(buildinfo.Version())
	var prev *semver.Version
	for level := domain.MinSchemaLevel; level <= domain.SchemaLevel; level++ {
		r, ok := levelReaders[level]
		require.True(t, ok, "level %d has no first reader", level)
		v := semver.MustParse(r)
		assert.False(t, v.GreaterThan(self), "level %d's reader %s is newer than this build (%s)", level, r, self)
		if prev != nil {
			assert.True(t, v.GreaterThan(prev), "level %d's reader %s is not after level %d's", level, r, level-1)
		}
		prev = v
	}
}
