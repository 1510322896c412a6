package domain

import (
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxNodeGroupCount is the largest node group; beyond it a cluster should be split.
const MaxNodeGroupCount = 1000

// Node roles.
const (
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// NodeGroupKind is a set of identical machines of one role in a tenant.
var NodeGroupKind = register(&KindInfo{
	Kind: "NodeGroup", Plural: "nodegroups", Subject: "nodegroup", TenantScoped: true,
	NormalizeSpec: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[NodeGroupSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) {
		return normalizeAs[NodeGroupStatus](raw, "status")
	},
	SpecEvent:  nodeGroupSpecEvent,
	CreateSpec: func(spec json.RawMessage) (json.RawMessage, []Cause) { return nodeGroupSpecMembers(nil, spec) },
	UpdateSpec: nodeGroupSpecMembers,
})

// NodeGroup is the typed view of a NodeGroup object.
type NodeGroup struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   ObjectMeta      `json:"metadata"`
	Spec       NodeGroupSpec   `json:"spec"`
	Status     NodeGroupStatus `json:"status"`
}

// NodeGroupSpec declares the machines of a group.
type NodeGroupSpec struct {
	// Role is controlplane or worker.
	Role string `json:"role"`
	// Count of machines, 0..MaxNodeGroupCount; a control-plane group needs an odd count >= 1 (etcd quorum).
	Count int `json:"count"`
	// Provider names the Provider object that builds the machines.
	Provider string `json:"provider"`
	// ProviderConfig is passed to the provider (shape, image, subnet, ...); a JSON object.
	ProviderConfig json.RawMessage `json:"providerConfig,omitempty"`
	// TalosVersion overrides the tenant's Talos version for this group.
	TalosVersion string `json:"talosVersion,omitempty"`
	// Labels are Kubernetes node labels given to the machines.
	Labels map[string]string `json:"labels,omitempty"`
	// Taints are Kubernetes node taints given to the machines.
	Taints         []Taint        `json:"taints,omitempty"`
	UpdateStrategy UpdateStrategy `json:"updateStrategy"`
	// Drain says whether a machine's Node is cordoned and drained (its pods
	// evicted, PodDisruptionBudgets honoured) before the machine is
	// rebooted or destroyed; absent means true.
	Drain *bool `json:"drain,omitempty"`
	// DrainTimeout bounds a drain, a Go duration ("10m" when absent, "0"
	// waits as long as it takes): a drain still blocked then fails the step
	// and leaves the machine as it was, uncordoned.
	DrainTimeout string `json:"drainTimeout,omitempty"`
	// Remediation, when set, has unhealthy machines replaced automatically
	// (domain.DecideRemediation gives the rules); absent, never.
	Remediation *RemediationPolicy `json:"remediation,omitempty"`
	// Schematic is the Image Factory schematic of the group's machines,
	// instead of the tenant's (the whole schematic, not a merge); absent:
	// the tenant's. A change re-images the machines in place through the
	// upgrade saga. It cannot go with providerConfig.installImage.
	Schematic *Schematic `json:"schematic,omitempty"`
	// Autoscaling, when set, lets the cluster-autoscaler size the group
	// within its bounds (RezusCloud's externalgrpc service); spec.count must
	// stay within them. Worker groups only.
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`
	// Members lists the group's machines by index once the group has
	// autoscaled or lost a named machine; absent, they are 0..count-1.
	// RezusCloud keeps it: an update that leaves it out or sends it back
	// unchanged has it follow spec.count (DecideMembers).
	Members *Members `json:"members,omitempty"`
}

// DefaultDrainTimeout is a node group's drainTimeout when it names none.
const DefaultDrainTimeout = 10 * time.Minute

// MaxDrainTimeout bounds drainTimeout (0, forever, aside).
const MaxDrainTimeout = 24 * time.Hour

// Drains reports whether the group's machines are drained before a disruption.
func (s *NodeGroupSpec) Drains() bool { return s.Drain == nil || *s.Drain }

// DrainTimeoutOrDefault is the group's drain bound; 0 means no bound. A
// value Validate refuses counts as the default.
func (s *NodeGroupSpec) DrainTimeoutOrDefault() time.Duration {
	if s.DrainTimeout == "" {
		return DefaultDrainTimeout
	}
	d, err := time.ParseDuration(s.DrainTimeout)
	if err != nil || d < 0 || d > MaxDrainTimeout {
		return DefaultDrainTimeout
	}
	return d
}

// Taint is a Kubernetes node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// UpdateStrategy bounds a rolling upgrade of the group.
type UpdateStrategy struct {
	// MaxParallelism is how many machines are upgraded at once; default 1.
	// Control-plane groups are always upgraded one machine at a time.
	MaxParallelism int `json:"maxParallelism"`
}

// Default fills the defaults in.
func (s *NodeGroupSpec) Default() {
	if s.UpdateStrategy.MaxParallelism == 0 {
		s.UpdateStrategy.MaxParallelism = 1
	}
	if s.TalosVersion != "" {
		if _, ok := ParseVersion(s.TalosVersion); ok {
			s.TalosVersion = canonicalVersion(s.TalosVersion)
		}
	}
	if s.Schematic != nil {
		s.Schematic.Default()
	}
	if s.Members != nil {
		s.Members.defaultMembers()
	}
}

// Validate reports every bad field.
func (s *NodeGroupSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Role, f.Child("role"), RoleControlPlane, RoleWorker)
	switch {
	case s.Count < 0 || s.Count > MaxNodeGroupCount:
		causes = append(causes, Cause{Field: f.Child("count").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 0 and %d, got %d", MaxNodeGroupCount, s.Count)})
	case s.Role == RoleControlPlane && (s.Count < 1 || s.Count%2 == 0):
		causes = append(causes, Cause{Field: f.Child("count").String(), Type: CauseInvalid, Message: fmt.Sprintf("a control-plane group needs an odd count of at least 1 for etcd quorum, got %d", s.Count)})
	}
	if s.Provider == "" {
		causes = append(causes, Cause{Field: f.Child("provider").String(), Type: CauseRequired, Message: "the name of a Provider is required"})
	} else {
		causes = append(causes, ValidateName(s.Provider, f.Child("provider").String())...)
	}
	pc, c := canonicalObject(s.ProviderConfig, f.Child("providerConfig"))
	causes = append(causes, c...)
	s.ProviderConfig = pc
	if s.Schematic != nil {
		causes = append(causes, s.Schematic.Validate(f.Child("schematic"))...)
		if in, err := ReadInstallSettings(s.ProviderConfig); err == nil && in.InstallImage != "" {
			causes = append(causes, Cause{Field: f.Child("schematic").String(), Type: CauseForbidden,
				Message: "providerConfig.installImage names the installer already; declare the schematic or the image, not both"})
		}
	}
	if s.TalosVersion != "" {
		causes = append(causes, validateVersion(s.TalosVersion, f.Child("talosVersion"))...)
	}
	causes = append(causes, ValidateLabels(s.Labels, f.Child("labels"))...)
	if len(s.Taints) > 64 {
		causes = append(causes, Cause{Field: f.Child("taints").String(), Type: CauseTooLong, Message: "at most 64 taints"})
	}
	for i, t := range s.Taints {
		p := f.Child("taints").Index(i)
		if t.Key == "" {
			causes = append(causes, Cause{Field: p.Child("key").String(), Type: CauseRequired, Message: "key is required"})
		} else if probs := labelKeyProblems(t.Key); len(probs) > 0 {
			causes = append(causes, labelCause(p.Child("key"), "key", probs))
		}
		if probs := labelValueProblems(t.Value); len(probs) > 0 {
			causes = append(causes, labelCause(p.Child("value"), "value", probs))
		}
		causes = append(causes, oneOf(t.Effect, p.Child("effect"), "NoSchedule", "PreferNoSchedule", "NoExecute")...)
	}
	if s.DrainTimeout != "" {
		d, err := time.ParseDuration(s.DrainTimeout)
		switch {
		case err != nil:
			causes = append(causes, Cause{Field: f.Child("drainTimeout").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not a duration such as 10m or 90s", s.DrainTimeout)})
		case d < 0 || d > MaxDrainTimeout:
			causes = append(causes, Cause{Field: f.Child("drainTimeout").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 0 (no bound) and %s, got %s", MaxDrainTimeout, s.DrainTimeout)})
		}
	}
	if s.Remediation != nil {
		causes = append(causes, s.Remediation.Validate(f.Child("remediation"))...)
	}
	causes = append(causes, s.validateAutoscaling(f)...)
	mp := s.UpdateStrategy.MaxParallelism
	switch {
	case mp < 1 || mp > MaxNodeGroupCount:
		causes = append(causes, Cause{Field: f.Child("updateStrategy", "maxParallelism").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 1 and %d, got %d", MaxNodeGroupCount, mp)})
	case s.Role == RoleControlPlane && mp != 1:
		causes = append(causes, Cause{Field: f.Child("updateStrategy", "maxParallelism").String(), Type: CauseInvalid, Message: "control-plane machines are upgraded one at a time to keep etcd quorum; must be 1"})
	}
	return causes
}

// NodeGroupStatus is what controllers observed about a group.
type NodeGroupStatus struct {
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	Replicas           int         `json:"replicas"`
	ReadyReplicas      int         `json:"readyReplicas"`
	Conditions         []Condition `json:"conditions,omitempty"`
}

// Default does nothing.
func (s *NodeGroupStatus) Default() {}

// Validate checks the status a controller wrote.
func (s *NodeGroupStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := validateConditions(s.Conditions, f.Child("conditions"))
	if s.Replicas < 0 {
		causes = append(causes, Cause{Field: f.Child("replicas").String(), Type: CauseInvalid, Message: "must not be negative"})
	}
	if s.ReadyReplicas < 0 || s.ReadyReplicas > s.Replicas {
		causes = append(causes, Cause{Field: f.Child("readyReplicas").String(), Type: CauseInvalid, Message: "must be between 0 and replicas"})
	}
	return causes
}

// nodeGroupSpecEvent names a change that only moved the count (and the
// members with it) NodeGroupScaled,
// because the apply worker and audit readers care about scaling on its own.
func nodeGroupSpecEvent(old, new json.RawMessage) string {
	var a, b NodeGroupSpec
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(new, &b) != nil || a.Count == b.Count {
		return ""
	}
	a.Count, a.Members = b.Count, b.Members // a named removal is a scale too
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	if string(x) == string(y) {
		return "NodeGroupScaled"
	}
	return ""
}
