package domain

// ProviderConfigField describes one key of a node group's
// spec.providerConfig that a provider type reads, so a form can offer it.
// The provider types' generators (controllers/apply) derive the list from the
// structs they decode providerConfig into, so it cannot drift from them.
type ProviderConfigField struct {
	// Key is the JSON key.
	Key string `json:"key"`
	// Kind is how the value is written: ConfigString, ConfigStrings (a list
	// of strings), ConfigNumber, ConfigInteger or ConfigBool.
	Kind string `json:"kind"`
	// Required keys are refused when missing or empty.
	Required bool `json:"required,omitempty"`
}

// Kinds of a ProviderConfigField.
const (
	ConfigString  = "string"
	ConfigStrings = "strings"
	ConfigNumber  = "number"
	ConfigInteger = "integer"
	ConfigBool    = "bool"
)
