package handlers

import (
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/tfrunner"
)

// GroupConfigFields describes the node-group providerConfig keys a provider
// type reads (nil for free-form module config), for the web UI's forms,
// which may not import tfrunner.
func GroupConfigFields(providerType string) []domain.ProviderConfigField {
	return tfrunner.GroupConfigFields(providerType)
}

// CheckGroupConfig runs the provider's own validation of a node group's
// providerConfig, the check the API makes when the group is written: the web
// UI asks it before creating a tenant, so a refused group config does not
// leave a tenant without its node groups behind.
func CheckGroupConfig(p *domain.Provider, spec *domain.NodeGroupSpec) []domain.Cause {
	return tfrunner.ValidateGroupConfig(p, spec)
}
