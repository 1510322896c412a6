package tfrunner

import (
	"errors"
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Write-time validation: the API runs the same checks the generator (and the
// metal path) runs at apply time, so a Provider or node group that a run
// would refuse is refused when it is written, with the field at fault.

// metalProviderConfig is a metal Provider's spec.config: it takes no
// settings (the machines are listed or selected per node group).
type metalProviderConfig struct{}

// ValidateProviderSpec runs the provider type's own validation of a
// Provider's spec.config; causes are rooted at "spec.config". A type the
// domain does not know is left to domain validation (it names spec.type).
func ValidateProviderSpec(spec *domain.ProviderSpec) []domain.Cause {
	if spec.Type == domain.ProviderMetal {
		var cfg metalProviderConfig
		return decodeStrictObject(spec.Config, &cfg, "spec.config")
	}
	typ, ok := providerTypes[spec.Type]
	if !ok {
		return nil
	}
	_, causes := typ.gen.decodeConfig(spec.Config)
	return causes
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
	if provider.Spec.Type == domain.ProviderMetal {
		return metalGroupCauses(ng)
	}
	typ, ok := providerTypes[provider.Spec.Type]
	if !ok {
		return nil
	}
	_, causes := typ.gen.decodeGroupConfig(ng.ProviderConfig)
	return causes
}

// metalGroupCauses are metalTargets' causes for a group that lists its
// machines; for a selector, the selector's syntax.
func metalGroupCauses(spec *domain.NodeGroupSpec) []domain.Cause {
	var cfg metalGroupConfig
	if causes := decodeStrictObject(spec.ProviderConfig, &cfg, "spec.providerConfig"); len(causes) > 0 {
		return causes
	}
	if cfg.Selector != "" && len(cfg.Machines) == 0 {
		if _, err := domain.ParseSelector(cfg.Selector); err != nil {
			return []domain.Cause{{Field: "spec.providerConfig.selector", Type: domain.CauseInvalid, Message: err.Error()}}
		}
		return nil
	}
	_, err := metalTargets(&domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "group"}, Spec: *spec}, nil)
	if err == nil {
		return nil
	}
	var de *domain.Error
	if errors.As(err, &de) && len(de.Causes) > 0 {
		return de.Causes
	}
	return []domain.Cause{{Field: "spec.providerConfig", Type: domain.CauseInvalid, Message: fmt.Sprint(err)}}
}
