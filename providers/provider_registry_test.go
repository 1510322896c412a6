package providers

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestEveryProviderTypeIsRegistered: domain names the provider types (the
// one list validation, the web UI and the CLI read); each is registered
// here with its validation, and built by tofu through a generator or, for
// metal, through the Talos API; this package registers no type domain does
// not name.
func TestEveryProviderTypeIsRegistered(t *testing.T) {
	names := domain.ProviderTypes()
	for _, typ := range names {
		t.Run(typ, func(t *testing.T) {
			pt, ok := LookupProviderType(typ)
			require.True(t, ok, "registered")
			require.Equal(t, typ, pt.Type)
			require.NotNil(t, pt.config, "its validation")
			switch typ {
			case domain.ProviderMetal:
				require.False(t, pt.Tofu(), "metal applies through the Talos API, not tofu")
				require.NotNil(t, pt.GroupConfig)
			case domain.ProviderModule:
				require.True(t, pt.Tofu())
				require.Nil(t, pt.GroupConfig, "a module's config is free-form")
			default:
				require.True(t, pt.Tofu(), "a generator")
				require.NotNil(t, pt.GroupConfig, "the fields its forms show")
			}
		})
	}
	require.Len(t, registry, len(names), "a registered type domain does not name")
}
