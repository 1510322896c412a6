package providers

import (
	"github.com/rezuscloud/rezuscloud/domain"
)

// Write-time validation: the API runs the same checks the generator (and the
// metal path) runs at apply time, so a Provider or node group that a run
// would refuse is refused when it is written, with the field at fault.

// ValidateProviderSpec runs the provider type's own validation of a
// Provider's spec.config; causes are rooted at "spec.config". A type the
// domain does not know is left to domain validation (it names spec.type).
func ValidateProviderSpec(spec *domain.ProviderSpec) []domain.Cause {
	typ, ok := registry[spec.Type]
	if !ok {
		return nil
	}
	_, causes := decodeSpecConfig(typ, spec)
	return causes
}

// decodeSpecConfig decodes spec.config by typ's rules, with the checks
// that need the rest of the spec: what both the write and the generator run.
func decodeSpecConfig(typ *ProviderType, spec *domain.ProviderSpec) (any, []domain.Cause) {
	cfg, causes := typ.config.decodeConfig(spec.Config)
	if typ.Type == domain.ProviderEmulated && len(causes) == 0 {
		causes = emulatedEndpointCauses(spec, cfg)
	}
	return cfg, causes
}

// ValidateGroupConfig runs the validation of a node group's
// spec.providerConfig by the type of the Provider it names; causes are rooted
// at "spec.providerConfig". For metal groups that select registered machines
// only the selector's syntax is checked: the machines it matches may be
// registered after the group.
func ValidateGroupConfig(provider *domain.Provider, ng *domain.NodeGroupSpec) []domain.Cause {
	if provider == nil {
		return nil
	}
	typ, ok := registry[provider.Spec.Type]
	if !ok {
		return nil
	}
	if typ.Type == domain.ProviderMetal {
		// The count is the group's, not its config's.
		return metalGroupCauses(ng)
	}
	_, causes := typ.config.decodeGroupConfig(ng.ProviderConfig)
	return causes
}
