package domain

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxPatchBytes bounds a config patch's text.
const MaxPatchBytes = 256 << 10

// ConfigPatchKind is a Talos machine-config patch applied to some of a tenant's machines.
var ConfigPatchKind = register(&KindInfo{
	Kind: "ConfigPatch", Plural: "configpatches", Subject: "configpatch", TenantScoped: true,
	NormalizeSpec:   func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[ConfigPatchSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[EmptyStatus](raw, "status") },
})

// ConfigPatch is the typed view of a ConfigPatch object.
type ConfigPatch struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   ObjectMeta      `json:"metadata"`
	Spec       ConfigPatchSpec `json:"spec"`
}

// Patch targets.
const (
	TargetAll       = "all"
	TargetRole      = "role"
	TargetNodeGroup = "nodeGroup"
	TargetMachine   = "machine"
)

// Patch formats.
const (
	PatchStrategic = "strategic"
	PatchJSON6902  = "json6902"
)

// ConfigPatchSpec declares a patch and where it applies.
type ConfigPatchSpec struct {
	Target PatchTarget `json:"target"`
	// Patch is the patch text, YAML or JSON.
	Patch string `json:"patch"`
	// Format is strategic (a partial machine config, merged) or json6902; default strategic.
	Format string `json:"format"`
	// Enabled patches are applied; default true.
	Enabled *bool `json:"enabled"`
	// Weight orders patches: lower first, then by name; 0..1000, default 0.
	Weight int `json:"weight"`
}

// PatchTarget selects the machines a patch applies to.
type PatchTarget struct {
	// Kind is all, role, nodeGroup or machine; default all.
	Kind string `json:"kind"`
	// Name is the role, node group or machine name; empty for all.
	Name string `json:"name,omitempty"`
}

// Default fills the defaults in.
func (s *ConfigPatchSpec) Default() {
	if s.Target.Kind == "" {
		s.Target.Kind = TargetAll
	}
	if s.Format == "" {
		s.Format = PatchStrategic
	}
	if s.Enabled == nil {
		t := true
		s.Enabled = &t
	}
}

// Validate reports every bad field of the spec at root.
func (s *ConfigPatchSpec) Validate(root string) []Cause { return s.validate(field.NewPath(root)) }

// validate reports every bad field of the spec at f, which is a rollout's
// change when the patch rides in one.
func (s *ConfigPatchSpec) validate(f *field.Path) []Cause {
	causes := oneOf(s.Target.Kind, f.Child("target", "kind"), TargetAll, TargetRole, TargetNodeGroup, TargetMachine)
	switch s.Target.Kind {
	case TargetAll:
		if s.Target.Name != "" {
			causes = append(causes, Cause{Field: f.Child("target", "name").String(), Type: CauseForbidden, Message: "must be empty when target.kind is all"})
		}
	case TargetRole:
		causes = append(causes, oneOf(s.Target.Name, f.Child("target", "name"), RoleControlPlane, RoleWorker)...)
	case TargetNodeGroup, TargetMachine:
		causes = append(causes, ValidateName(s.Target.Name, f.Child("target", "name").String())...)
	}
	causes = append(causes, oneOf(s.Format, f.Child("format"), PatchStrategic, PatchJSON6902)...)
	switch {
	case strings.TrimSpace(s.Patch) == "":
		causes = append(causes, Cause{Field: f.Child("patch").String(), Type: CauseRequired, Message: "patch text is required"})
	case len(s.Patch) > MaxPatchBytes:
		causes = append(causes, Cause{Field: f.Child("patch").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxPatchBytes)})
	case s.Format == PatchJSON6902 && strings.HasPrefix(strings.TrimSpace(s.Patch), "["):
		causes = append(causes, validateJSON6902(s.Patch, f.Child("patch"))...)
	}
	if s.Weight < 0 || s.Weight > 1000 {
		causes = append(causes, Cause{Field: f.Child("weight").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 0 and 1000, got %d", s.Weight)})
	}
	return causes
}

// validateJSON6902 checks a JSON-form RFC 6902 patch. YAML-form patches are
// checked when the config is rendered, where a YAML parser is at hand.
func validateJSON6902(text string, f *field.Path) []Cause {
	var ops []struct {
		Op   string `json:"op"`
		Path string `json:"path"`
		From string `json:"from"`
	}
	if err := json.Unmarshal([]byte(text), &ops); err != nil {
		return []Cause{{Field: f.String(), Type: CauseInvalid, Message: "not a JSON 6902 patch: " + err.Error()}}
	}
	var causes []Cause
	for i, op := range ops {
		p := f.Index(i)
		switch op.Op {
		case "add", "remove", "replace", "test":
		case "move", "copy":
			if !strings.HasPrefix(op.From, "/") {
				causes = append(causes, Cause{Field: p.Child("from").String(), Type: CauseInvalid, Message: "must be a JSON pointer starting with /"})
			}
		default:
			causes = append(causes, Cause{Field: p.Child("op").String(), Type: CauseNotSupported, Message: fmt.Sprintf("%q is not an RFC 6902 operation", op.Op)})
		}
		if !strings.HasPrefix(op.Path, "/") {
			causes = append(causes, Cause{Field: p.Child("path").String(), Type: CauseInvalid, Message: "must be a JSON pointer starting with /"})
		}
	}
	return causes
}

// EmptyStatus is the status of kinds that have none.
type EmptyStatus struct{}

// Default does nothing.
func (*EmptyStatus) Default() {}

// Validate accepts the empty status.
func (*EmptyStatus) Validate(string) []Cause { return nil }
