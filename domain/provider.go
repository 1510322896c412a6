package domain

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Provider types.
const (
	ProviderEmulated  = "emulated"
	ProviderMetal     = "metal"
	ProviderOCI       = "oci"
	ProviderOpenStack = "openstack"
	// ProviderModule builds machines with an OpenTofu module held in
	// spec.module (docs/providers.md gives the module contract).
	ProviderModule = "module"
)

// ProviderTypes are the Provider.spec.types, sorted: the one list of their
// names, which validation, the web UI's form and the CLI's help read.
// What each type does (its config, generator, projection) is the registry
// in providers, keyed by these names; a test there checks that
// every name is registered and nothing else is.
func ProviderTypes() []string {
	return []string{ProviderEmulated, ProviderMetal, ProviderModule, ProviderOCI, ProviderOpenStack}
}

// Bounds of a module provider's files.
const (
	// MaxModuleFiles bounds the files of spec.module.
	MaxModuleFiles = 64
	// MaxModuleBytes bounds the total size of spec.module's files.
	MaxModuleBytes = 1 << 20
	// MaxModuleFileName bounds a file name.
	MaxModuleFileName = 128
	// maxModuleEncoded bounds the files as JSON, so the Provider's event
	// fits the event stream's largest message (2 MiB).
	maxModuleEncoded = 3 << 19
)

// moduleFileRe is a module file's name: one directory, OpenTofu's own
// extensions (.tf native syntax, .tf.json JSON syntax).
var moduleFileRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*\.tf(\.json)?$`)

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
	// Type is emulated, metal, module, oci or openstack.
	Type string `json:"type"`
	// Config is the provider's non-secret settings (region, endpoints, ...); a JSON object.
	Config json.RawMessage `json:"config,omitempty"`
	// CredentialsRef names the stored secret with the cloud credentials. Credentials
	// themselves are never part of a spec, so they never reach events.
	CredentialsRef *SecretRef `json:"credentialsRef,omitempty"`
	// Module is the OpenTofu module a module provider builds machines with;
	// only for type module.
	Module *ModuleSource `json:"module,omitempty"`
	// TenantSelector, when set, is a label selector (Kubernetes syntax) of
	// the tenants whose node groups may name this Provider: a tenant's
	// editor otherwise builds on any Provider, another team's cloud account
	// included. Empty serves every tenant.
	TenantSelector string `json:"tenantSelector,omitempty"`
	// Versions, when set, are the only Kubernetes and Talos versions the
	// machines this Provider builds can run; absent, any version.
	Versions *ProviderVersions `json:"versions,omitempty"`
}

// AllowsTenant reports whether a node group of the tenant with labels may
// name the Provider; a selector that does not parse allows none.
func (s *ProviderSpec) AllowsTenant(labels map[string]string) bool {
	if s.TenantSelector == "" {
		return true
	}
	sel, err := ParseSelector(s.TenantSelector)
	return err == nil && sel.Matches(labels)
}

// TenantRefused is the cause of a node group of tenant naming provider
// whose tenantSelector does not match the tenant's labels.
func TenantRefused(field, provider, tenant, selector string) Cause {
	return Cause{Field: field, Type: CauseForbidden,
		Message: fmt.Sprintf("provider %q serves only tenants matching %q; tenant %s does not", provider, selector, tenant)}
}

// ModuleSource is an OpenTofu module, one directory of files.
type ModuleSource struct {
	// Files maps a file name (main.tf, variables.tf, outputs.tf.json, ...)
	// to its text.
	Files map[string]string `json:"files"`
}

// ModuleFileField is the field path of one module file, for causes.
func ModuleFileField(f *field.Path, name string) string {
	return f.Child("module", "files").Key(name).String()
}

// SortedFiles are the module's file names in order.
func (m *ModuleSource) SortedFiles() []string {
	out := make([]string, 0, len(m.Files))
	for n := range m.Files {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// validateModule checks the shape of spec.module: the files' names, count
// and size (their content is OpenTofu's to check; see controllers/modulecheck).
func validateModule(s *ProviderSpec, f *field.Path) []Cause {
	if s.Type != ProviderModule {
		if s.Module != nil {
			return []Cause{{Field: f.Child("module").String(), Type: CauseForbidden, Message: fmt.Sprintf("only a provider of type %s has a module", ProviderModule)}}
		}
		return nil
	}
	if s.Module == nil || len(s.Module.Files) == 0 {
		return []Cause{{Field: f.Child("module", "files").String(), Type: CauseRequired, Message: "a module provider needs its module's files, e.g. {\"main.tf\": \"...\"}"}}
	}
	var causes []Cause
	if len(s.Module.Files) > MaxModuleFiles {
		causes = append(causes, Cause{Field: f.Child("module", "files").String(), Type: CauseTooLong, Message: fmt.Sprintf("must have no more than %d files", MaxModuleFiles)})
	}
	total := 0
	for _, name := range s.Module.SortedFiles() {
		text := s.Module.Files[name]
		total += len(text)
		ff := ModuleFileField(f, name)
		switch {
		case len(name) > MaxModuleFileName:
			causes = append(causes, Cause{Field: ff, Type: CauseTooLong, Message: fmt.Sprintf("the file name must be no more than %d characters", MaxModuleFileName)})
		case !moduleFileRe.MatchString(name):
			causes = append(causes, Cause{Field: ff, Type: CauseInvalid,
				Message: fmt.Sprintf("%q is not a module file name: letters, digits, '_', '-', '.', ending in .tf or .tf.json, no directories", name)})
		}
		if !utf8.ValidString(text) {
			causes = append(causes, Cause{Field: ff, Type: CauseInvalid, Message: "must be UTF-8 text"})
		}
	}
	if total > MaxModuleBytes {
		causes = append(causes, Cause{Field: f.Child("module", "files").String(), Type: CauseTooLong, Message: fmt.Sprintf("the files total %d bytes; at most %d", total, MaxModuleBytes)})
	} else if b, err := json.Marshal(s.Module.Files); err == nil && len(b) > maxModuleEncoded {
		// JSON escaping (quotes, control characters) can double the size;
		// an event holds the whole object.
		causes = append(causes, Cause{Field: f.Child("module", "files").String(), Type: CauseTooLong, Message: fmt.Sprintf("the files take %d bytes encoded as JSON; at most %d", len(b), maxModuleEncoded)})
	}
	return causes
}

// SecretRef names a secret held outside events and readable buckets.
type SecretRef struct {
	Name string `json:"name"`
}

// Default writes spec.versions in its canonical form; an empty one is
// dropped, as it restricts nothing.
func (s *ProviderSpec) Default() {
	if s.Versions.Empty() {
		s.Versions = nil
		return
	}
	s.Versions.Default()
}

// Validate reports every bad field.
func (s *ProviderSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Type, f.Child("type"), ProviderTypes()...)
	causes = append(causes, validateModule(s, f)...)
	cfg, c := canonicalObject(s.Config, f.Child("config"))
	causes = append(causes, c...)
	s.Config = cfg
	if s.CredentialsRef != nil {
		causes = append(causes, ValidateName(s.CredentialsRef.Name, f.Child("credentialsRef", "name").String())...)
	}
	if s.TenantSelector != "" {
		if len(s.TenantSelector) > 1024 {
			causes = append(causes, Cause{Field: f.Child("tenantSelector").String(), Type: CauseTooLong, Message: "must be no more than 1024 characters"})
		} else if _, err := ParseSelector(s.TenantSelector); err != nil {
			causes = append(causes, Cause{Field: f.Child("tenantSelector").String(), Type: CauseInvalid, Message: err.Error()})
		}
	}
	if s.Versions != nil {
		causes = append(causes, s.Versions.Validate(f.Child("versions"))...)
	}
	return causes
}

// A module provider's Validated condition: `tofu validate` of its module,
// run after every change of spec (ObservedGeneration says which). Status
// True (reason Valid), False (reason Invalid, or InitFailed when `tofu init`
// could not install its providers; the message holds tofu's diagnostics, one
// per line, "file:line:col: summary: detail"), or Unknown (reason Pending)
// while it runs.
const (
	ConditionValidated = "Validated"

	ReasonModuleValid      = "Valid"
	ReasonModuleInvalid    = "Invalid"
	ReasonModuleInitFailed = "InitFailed"
	ReasonModulePending    = "Pending"
)

// ProviderStatus is what controllers observed about a provider.
type ProviderStatus struct {
	Conditions []Condition `json:"conditions,omitempty"`
}

// Default does nothing.
func (s *ProviderStatus) Default() {}

// Validate checks the status a controller wrote.
func (s *ProviderStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	return validateConditions(s.Conditions, f.Child("conditions"))
}
