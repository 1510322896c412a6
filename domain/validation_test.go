package domain_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in   string
		want domain.Version
		ok   bool
	}{
		{"v1.13.0", domain.Version{Major: 1, Minor: 13}, true},
		{"1.13.2", domain.Version{Major: 1, Minor: 13, Patch: 2}, true},
		{"v1.14.0-beta.1+build.5", domain.Version{Major: 1, Minor: 14, Pre: "beta.1"}, true},
		{"v1.13", domain.Version{}, false},
		{"v1", domain.Version{}, false},
		{"vv1.13.0", domain.Version{}, false},
		{"v01.13.0", domain.Version{}, false},
		{"v1.13.0-", domain.Version{}, false},
		// SemVer 2.0 forbids leading zeros in numeric pre-release identifiers.
		{"v1.13.0-01", domain.Version{}, false},
		{" v1.13.0", domain.Version{}, false},
		{"", domain.Version{}, false},
	}
	for _, tt := range tests {
		got, ok := domain.ParseVersion(tt.in)
		require.Equal(t, tt.ok, ok, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
}

func TestValidateName(t *testing.T) {
	require.Empty(t, domain.ValidateName("a-1", "metadata.name"))
	require.Empty(t, domain.ValidateName(strings.Repeat("a", 63), "metadata.name"))
	for name, typ := range map[string]string{
		"":                      domain.CauseRequired,
		strings.Repeat("a", 64): domain.CauseTooLong,
		"A":                     domain.CauseInvalid,
		"a.b":                   domain.CauseInvalid,
		"-a":                    domain.CauseInvalid,
		"a_b":                   domain.CauseInvalid,
	} {
		c := domain.ValidateName(name, "metadata.name")
		require.Len(t, c, 1, name)
		require.Equal(t, "metadata.name", c[0].Field, name)
		require.Equal(t, typ, c[0].Type, name)
	}
}
