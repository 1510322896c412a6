package drain

import (
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Policy is whether a machine is drained before it is disrupted, and for
// how long the drain may wait.
type Policy struct {
	Drain   bool
	Timeout time.Duration
	// Why says why not, for the log.
	Why string
}

// Decide decides the drain of a machine of group ng (nil when the group is
// gone: drained, for the default timeout) in a run: none without a
// Kubernetes client, when the run opts out (optOut names how), when the
// group says drain: false, or when the server says the group's machines run
// no Kubernetes (skip: the emulated provider of a light emulator).
func Decide(haveKube bool, optOut string, ng *domain.NodeGroupSpec, skip string) Policy {
	switch {
	case !haveKube:
		return Policy{Why: "no Kubernetes client is configured"}
	case optOut != "":
		return Policy{Why: optOut}
	case ng == nil:
		return Policy{Drain: true, Timeout: domain.DefaultDrainTimeout}
	case !ng.Drains():
		return Policy{Why: "its node group says drain: false"}
	case skip != "":
		return Policy{Why: skip}
	}
	return Policy{Drain: true, Timeout: ng.DrainTimeoutOrDefault()}
}

// NodeName is the Kubernetes Node of a machine: Talos names it after the
// machine's hostname.
func NodeName(m *domain.Machine) string {
	if m.Spec.Hostname != "" {
		return m.Spec.Hostname
	}
	return m.Metadata.Name
}
