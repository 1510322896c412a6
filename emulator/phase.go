package emulator

import (
	"encoding/base64"
	"strings"
)

// Phase is a node's boot stage.
type Phase string

// The boot stages. A node is reachable in PhaseMaintenance, PhaseBooting and
// PhaseRunning (except a worker waiting for trustd, see NodeStatus.Error), and
// unreachable in the others: its address stays bound but every connection is
// dropped, as a client of a rebooting machine sees it.
const (
	// PhaseMaintenance: booted without a config; insecure TLS, Version and
	// ApplyConfiguration only.
	PhaseMaintenance Phase = "maintenance"
	// PhaseInstalling: a config was applied; installing and rebooting.
	PhaseInstalling Phase = "installing"
	// PhaseRebooting: rebooting after Reboot, Reset or Upgrade.
	PhaseRebooting Phase = "rebooting"
	// PhaseBooting: apid is up with mTLS; services are starting.
	PhaseBooting Phase = "booting"
	// PhaseRunning: services are up (healthy unless a fault says otherwise).
	PhaseRunning Phase = "running"
	// PhaseUnreachable: the unreachable fault took the API down.
	PhaseUnreachable Phase = "unreachable"
	// PhaseFailed: the node could not start its API (e.g. its address is taken);
	// NodeStatus.Error says why.
	PhaseFailed Phase = "failed"
)

// Faults are the failures injected into one node. The zero value is a
// healthy node; InjectFault replaces a node's faults as a whole.
type Faults struct {
	// FailNextUpgrade makes the next Upgrade call fail with Internal; it clears
	// itself once used.
	FailNextUpgrade bool `json:"failNextUpgrade,omitempty"`
	// Hang makes every request block until its context ends.
	Hang bool `json:"hang,omitempty"`
	// Unreachable takes the API down until the fault is cleared: connections
	// are dropped as soon as they are accepted (the address stays bound so no
	// other node takes it), which a client sees as Unavailable.
	Unreachable bool `json:"unreachable,omitempty"`
	// Unhealthy makes every service report unhealthy.
	Unhealthy bool `json:"unhealthy,omitempty"`
	// RefuseApply makes every ApplyConfiguration fail with Unavailable (in
	// maintenance mode too) until the fault is lifted, so a caller's retry can
	// be tested.
	RefuseApply bool `json:"refuseApply,omitempty"`
	// KubernetesDownAt keeps a control plane's Kubernetes components from
	// starting while its config names this Kubernetes version (e.g.
	// "v1.35.5"), as images that cannot be pulled would: its static pods
	// report nothing running and, with the real control plane, none of its
	// parts run. A config at another version runs as usual, so a rollback
	// heals the node.
	KubernetesDownAt string `json:"kubernetesDownAt,omitempty"`
	// KubeletDown stops the node's kubelet (with the real control plane)
	// until the fault is lifted: its service no longer runs and its Node
	// stops heartbeating, as when the kubelet crashes.
	KubeletDown bool `json:"kubeletDown,omitempty"`
}

// kubernetesDown reports whether the fault keeps the control plane of
// Kubernetes version (the config's image tag) from starting.
func (f Faults) kubernetesDown(version string) bool {
	if f.KubernetesDownAt == "" {
		return false
	}
	return strings.TrimPrefix(f.KubernetesDownAt, "v") == strings.TrimPrefix(version, "v")
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
