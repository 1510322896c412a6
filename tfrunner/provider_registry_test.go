package tfrunner

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestEveryProviderTypeIsBuilt: domain names the provider types (the one
// list validation, the web UI and the CLI read); each is built here, by
// tofu through a ProviderType or, for metal, through the Talos API, and
// this package knows no type domain does not name.
func TestEveryProviderTypeIsBuilt(t *testing.T) {
	names := domain.ProviderTypes()
	for _, typ := range names {
		t.Run(typ, func(t *testing.T) {
			_, tofu := LookupProviderType(typ)
			_, fields := groupConfigStructs[typ]
			switch typ {
			case domain.ProviderMetal:
				require.False(t, tofu, "metal applies through the Talos API, not tofu")
				require.True(t, fields)
			case domain.ProviderModule:
				require.True(t, tofu)
				require.False(t, fields, "a module's config is free-form")
			default:
				require.True(t, tofu, "a generator")
				require.True(t, fields, "the fields its forms show")
			}
		})
	}
	for typ := range providerTypes {
		require.True(t, slices.Contains(names, typ), "%s is built but not a domain provider type", typ)
	}
	for typ := range groupConfigStructs {
		require.True(t, slices.Contains(names, typ), "%s has fields but is not a domain provider type", typ)
	}
}
