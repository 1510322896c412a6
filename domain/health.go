package domain

import "time"

// TenantHealthKind is the kind of the document GET /api/v1/tenants/{t}/health
// answers. It is not a stored resource: it is computed on demand by probing
// the tenant's machines through the Talos API.
const TenantHealthKind = "TenantHealth"

// The overall states of a tenant's health (TenantHealth.State).
const (
	// HealthReady: every machine answered and every service checked is healthy, etcd has quorum.
	HealthReady = "Ready"
	// HealthDegraded: some machines answered, but something is wrong (see Reasons).
	HealthDegraded = "Degraded"
	// HealthUnreachable: no machine answered (or the tenant has none).
	HealthUnreachable = "Unreachable"
)

// The etcd membership of one control-plane machine (MachineHealth.Etcd).
const (
	EtcdMemberHealthy   = "healthy"
	EtcdMemberUnhealthy = "unhealthy"
	// EtcdNotMember: the member list was read and the machine is not in it.
	EtcdNotMember = "not-member"
	// EtcdUnknown: no control plane answered the member list.
	EtcdUnknown = "unknown"
)

// The state of a machine's Kubernetes Node (MachineHealth.Node, MachineStatus.Node).
const (
	NodeReady    = "Ready"
	NodeNotReady = "NotReady"
	// NodeMissing: the API server answered and knows no Node of the machine.
	NodeMissing = "Missing"
	// NodeUnknown: the API server did not answer.
	NodeUnknown = "Unknown"
)

// ConditionHealthy is the condition health probes keep on machines and
// tenants; its LastTransitionTime is when the machine last became healthy or
// unhealthy (remediation counts from it).
const ConditionHealthy = "Healthy"

// TenantHealth is what one probe of a tenant's machines found.
type TenantHealth struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Tenant     string `json:"tenant"`
	// State is Ready, Degraded or Unreachable.
	State string `json:"state"`
	// Reasons say, in words, why the state is not Ready: etcd first, then
	// control planes, then workers.
	Reasons []string `json:"reasons,omitempty"`
	// ObservedAt is when the probe started.
	ObservedAt time.Time `json:"observedAt"`
	// Duration is how long the probe took, e.g. "41ms".
	Duration string `json:"duration"`
	// Cached is true when this answer is a recent probe's, not a new one.
	Cached bool       `json:"cached"`
	Etcd   EtcdHealth `json:"etcd"`
	// Kubernetes is the cluster's API server as the probe found it; absent
	// when the server knows the tenant's machines run no Kubernetes (the
	// light emulator).
	Kubernetes *KubernetesHealth `json:"kubernetes,omitempty"`
	// Machines are the control planes, then the workers, each by name.
	Machines []MachineHealth `json:"machines"`
}

// EtcdHealth is the etcd cluster as a control plane reported its members.
type EtcdHealth struct {
	// ReportedBy is the control-plane machine whose member list this is.
	ReportedBy string             `json:"reportedBy,omitempty"`
	Members    []EtcdMemberHealth `json:"members,omitempty"`
	// Healthy counts the voting members whose machine answered with a healthy etcd service.
	Healthy int `json:"healthy"`
	// Quorum is true when more than half of the voting members are healthy.
	Quorum bool `json:"quorum"`
	// Error is why no member list could be read.
	Error string `json:"error,omitempty"`
}

// KubernetesHealth is the tenant's Kubernetes API server.
type KubernetesHealth struct {
	// Ready is true when the API server answered /readyz with ok.
	Ready bool `json:"ready"`
	// Version is the API server's /version (gitVersion).
	Version string `json:"version,omitempty"`
	// Error is why it is not ready.
	Error string `json:"error,omitempty"`
}

// EtcdMemberHealth is one etcd member.
type EtcdMemberHealth struct {
	// Name is the member's name as etcd knows it (the node's hostname).
	Name string `json:"name"`
	// Machine is the tenant's machine the member runs on ("" when none matches).
	Machine string `json:"machine,omitempty"`
	Healthy bool   `json:"healthy"`
	Learner bool   `json:"learner,omitempty"`
}

// MachineHealth is one machine as the probe found it.
type MachineHealth struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Address string `json:"address,omitempty"`
	// Reachable is true when the machine answered through its Talos API.
	Reachable    bool   `json:"reachable"`
	TalosVersion string `json:"talosVersion,omitempty"`
	// Schematic is the Image Factory schematic of the image the machine
	// runs and Extensions its system extensions (talosctl get extensions).
	Schematic  string   `json:"schematic,omitempty"`
	Extensions []string `json:"extensions,omitempty"`
	// Stage is Running or Booting when the machine answered, else empty.
	Stage string `json:"stage,omitempty"`
	// Ready is true when the machine answered and every service checked is healthy.
	Ready bool `json:"ready"`
	// Services are the services checked: apid, etcd (control planes) and kubelet.
	Services []ServiceHealth `json:"services,omitempty"`
	// Etcd is the machine's etcd membership on a control plane: healthy,
	// unhealthy, not-member or unknown; empty on workers.
	Etcd string `json:"etcd,omitempty"`
	// Node is the machine's Kubernetes Node: Ready, NotReady, Missing or
	// Unknown; empty when Kubernetes is not checked. A Node that is not
	// Ready makes the machine not ready.
	Node string `json:"node,omitempty"`
	// KubeletVersion is the version the Node's kubelet reports.
	KubeletVersion string `json:"kubeletVersion,omitempty"`
	// Reasons say what is wrong with this machine.
	Reasons []string `json:"reasons,omitempty"`
	// Error is why the machine could not be probed.
	Error string `json:"error,omitempty"`
}

// ServiceHealth is one Talos service of a machine.
type ServiceHealth struct {
	ID string `json:"id"`
	// State is Talos's service state (Running, Starting, Preparing, ...), or
	// Missing when the machine does not list the service.
	State   string `json:"state"`
	Healthy bool   `json:"healthy"`
	Message string `json:"message,omitempty"`
}
