package domain

import "encoding/json"

// Provider types.
const (
	ProviderEmulated  = "emulated"
	ProviderMetal     = "metal"
	ProviderOCI       = "oci"
	ProviderOpenStack = "openstack"
)

// ProviderKind is a place machines are built: a cloud account, bare metal or the emulator.
var ProviderKind = register(&KindInfo{
	Kind: "Provider", Plural: "providers", Subject: "provider",
	NormalizeSpec: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[ProviderSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) {
		return normalizeAs[ProviderStatus](raw, "status")
	},
})

// Provider is the typed view of a Provider object.
type Provider struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   ObjectMeta     `json:"metadata"`
	Spec       ProviderSpec   `json:"spec"`
	Status     ProviderStatus `json:"status"`
}

// ProviderSpec declares a provider.
type ProviderSpec struct {
	// Type is emulated, metal, oci or openstack.
	Type string `json:"type"`
	// Config is the provider's non-secret settings (region, endpoints, ...); a JSON object.
	Config json.RawMessage `json:"config,omitempty"`
	// CredentialsRef names the stored secret with the cloud credentials. Credentials
	// themselves are never part of a spec, so they never reach events.
	CredentialsRef *SecretRef `json:"credentialsRef,omitempty"`
}

// SecretRef names a secret held outside events and readable buckets.
type SecretRef struct {
	Name string `json:"name"`
}

// Default does nothing: providers have no defaults.
func (s *ProviderSpec) Default() {}

// Validate reports every bad field.
func (s *ProviderSpec) Validate(f string) []Cause {
	causes := oneOf(s.Type, f+".type", ProviderEmulated, ProviderMetal, ProviderOCI, ProviderOpenStack)
	cfg, c := canonicalObject(s.Config, f+".config")
	causes = append(causes, c...)
	s.Config = cfg
	if s.CredentialsRef != nil {
		causes = append(causes, ValidateName(s.CredentialsRef.Name, f+".credentialsRef.name")...)
	}
	return causes
}

// ProviderStatus is what controllers observed about a provider.
type ProviderStatus struct {
	Conditions []Condition `json:"conditions,omitempty"`
}

// Default does nothing.
func (s *ProviderStatus) Default() {}

// Validate checks the status a controller wrote.
func (s *ProviderStatus) Validate(f string) []Cause {
	return validateConditions(s.Conditions, f+".conditions")
}
