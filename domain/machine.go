package domain

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MachineKind is one Talos node of a tenant. The apply worker creates machines
// from the infrastructure's state; status comes from observation through the
// Talos API.
var MachineKind = register(&KindInfo{
	Kind: "Machine", Plural: "machines", Subject: "machine", TenantScoped: true,
	NormalizeSpec:   func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[MachineSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[MachineStatus](raw, "status") },
	InitialStatus: func() json.RawMessage {
		return json.RawMessage(`{"stage":"Unknown","ready":false,"configUpToDate":false}`)
	},
	MetaEvent: machineMetaEvent,
})

// The day-2 config path's marks on a Machine.
const (
	// AnnotationConfigHash is the hex SHA-256 of the config bytes the machine
	// holds: set when its day-0 config is given (user data, maintenance-mode
	// apply) and each time a config is applied to it through the Talos API.
	AnnotationConfigHash = "rezuscloud.io/config-hash"
	// ConditionConfigApplied says whether the machine holds its rendered
	// config: True (reason AppliedInPlace, AppliedWithReboot or Day0), False
	// with the cause (reason ApplyFailed, RenderFailed, Unreachable, ...).
	ConditionConfigApplied = "ConfigApplied"
	// EventMachineConfigApplied is the event of an update that changed only a
	// machine's config hash: a config reached it. Its history is the machine's
	// config history.
	EventMachineConfigApplied = "MachineConfigApplied"
	// AnnotationInstallDisk on a registered (metal) Machine is the disk
	// Talos installs to on it, over its node group's installDisk.
	AnnotationInstallDisk = "rezuscloud.io/install-disk"
)

// machineMetaEvent names a change of the config hash alone MachineConfigApplied.
func machineMetaEvent(old, new *ObjectMeta) string {
	if h := new.Annotations[AnnotationConfigHash]; h == "" || h == old.Annotations[AnnotationConfigHash] {
		return ""
	}
	a, b := maps.Clone(old.Annotations), maps.Clone(new.Annotations)
	delete(a, AnnotationConfigHash)
	delete(b, AnnotationConfigHash)
	if !maps.Equal(a, b) || !maps.Equal(old.Labels, new.Labels) || !slices.Equal(old.Finalizers, new.Finalizers) {
		return ""
	}
	return EventMachineConfigApplied
}

// Machine is the typed view of a Machine object.
type Machine struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   ObjectMeta    `json:"metadata"`
	Spec       MachineSpec   `json:"spec"`
	Status     MachineStatus `json:"status"`
}

// LabelManagedBy on a Machine says what made it and keeps it: ManagedByTofu
// (projected from a provider's Terraform state) or ManagedByMetal (configured
// through the Talos API by the metal provider).
const (
	LabelManagedBy = "rezuscloud.io/managed-by"
	ManagedByTofu  = "tofu"
	ManagedByMetal = "metal"
)

// MachineSpec is what the infrastructure says about a machine.
type MachineSpec struct {
	NodeGroup string `json:"nodeGroup"`
	Role      string `json:"role"`
	// Address is the management (Talos API) address: an IP address or a hostname.
	Address    string `json:"address,omitempty"`
	ProviderID string `json:"providerID,omitempty"`
	Shape      string `json:"shape,omitempty"`
	Hostname   string `json:"hostname,omitempty"`
}

// Default does nothing: machines have no defaults.
func (s *MachineSpec) Default() {}

// Validate reports every bad field.
func (s *MachineSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := ValidateName(s.NodeGroup, f.Child("nodeGroup").String())
	causes = append(causes, oneOf(s.Role, f.Child("role"), RoleControlPlane, RoleWorker)...)
	if s.Address != "" {
		if _, err := netip.ParseAddr(s.Address); err != nil && !validSubdomain(s.Address) {
			causes = append(causes, Cause{Field: f.Child("address").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is neither an IP address nor a DNS name", s.Address)})
		}
	}
	if s.Hostname != "" && !validSubdomain(s.Hostname) {
		causes = append(causes, Cause{Field: f.Child("hostname").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q must be a DNS-1123 subdomain", s.Hostname)})
	}
	if len(s.ProviderID) > 1024 {
		causes = append(causes, Cause{Field: f.Child("providerID").String(), Type: CauseTooLong, Message: "must be no more than 1024 characters"})
	}
	if len(s.Shape) > 253 {
		causes = append(causes, Cause{Field: f.Child("shape").String(), Type: CauseTooLong, Message: "must be no more than 253 characters"})
	}
	return causes
}

// MachineStatus is what was observed through the Talos API.
type MachineStatus struct {
	// Stage is the Talos machine stage (Booting, Running, Upgrading, ...) or Unknown.
	Stage        string `json:"stage"`
	Ready        bool   `json:"ready"`
	TalosVersion string `json:"talosVersion,omitempty"`
	// Schematic is the Image Factory schematic of the image the machine
	// was last seen running ("" when its image is not the factory's) and
	// Extensions the system extensions it runs, as its Talos API reports
	// them.
	Schematic      string   `json:"schematic,omitempty"`
	Extensions     []string `json:"extensions,omitempty"`
	ConfigUpToDate bool     `json:"configUpToDate"`
	// Node is the state of the machine's Kubernetes Node at the last health
	// probe (Ready, NotReady, Missing, Unknown; empty when not checked).
	Node     string     `json:"node,omitempty"`
	LastSeen *time.Time `json:"lastSeen,omitempty"`
	// FirstHealthy is when a probe first found the machine healthy since it
	// was built or last replaced (remediation's startupTimeout runs until
	// then).
	FirstHealthy *time.Time  `json:"firstHealthy,omitempty"`
	Conditions   []Condition `json:"conditions,omitempty"`
	// ConfigWait is what the config controller waits for on this machine
	// after a config that rebooted it (the machine to be back, then its
	// Node to be Ready), with the wait's deadline; absent when it waits for
	// nothing. Only the config controller writes it.
	ConfigWait *StepWait `json:"configWait,omitempty"`
}

// Default fills in an Unknown stage.
func (s *MachineStatus) Default() {
	if s.Stage == "" {
		s.Stage = "Unknown"
	}
}

// Validate checks the status a controller wrote.
func (s *MachineStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := validateConditions(s.Conditions, f.Child("conditions"))
	if s.TalosVersion != "" {
		causes = append(causes, validateVersion(s.TalosVersion, f.Child("talosVersion"))...)
	}
	if s.Schematic != "" && !validSchematicID(s.Schematic) {
		causes = append(causes, Cause{Field: f.Child("schematic").String(), Type: CauseInvalid, Message: "must be a schematic ID: 64 lower-case hex digits"})
	}
	if len(s.Extensions) > MaxSchematicExtensions {
		causes = append(causes, Cause{Field: f.Child("extensions").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d extensions", MaxSchematicExtensions)})
	}
	switch s.Node {
	case "", NodeReady, NodeNotReady, NodeMissing, NodeUnknown:
	default:
		causes = append(causes, Cause{Type: CauseNotSupported, Field: f.Child("node").String(),
			Message: fmt.Sprintf("Unsupported value: %q: supported values: %q, %q, %q, %q", s.Node, NodeReady, NodeNotReady, NodeMissing, NodeUnknown)})
	}
	if s.ConfigWait != nil {
		causes = append(causes, s.ConfigWait.Validate(f.Child("configWait"))...)
	}
	return causes
}
