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

func TestFormatLevel(t *testing.T) {
	tests := []struct {
		name string
		cfg  serveConfig
		want int
	}{
		{name: "single server", want: domain.SchemaLevel},
		{name: "external NATS", cfg: serveConfig{NATSURL: "nats://127.0.0.1:4222"}, want: domain.MinSchemaLevel},
		{name: "cluster of embedded nodes", cfg: serveConfig{Cluster: clusterFlagsConfig{Listen: "127.0.0.1:6222"}}, want: domain.MinSchemaLevel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, formatLevel(tt.cfg))
		})
	}
}
