package configsync

import (
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// action is what a machine's config needs.
type action int

const (
	// actNone: it holds its rendered config and its status says so.
	actNone action = iota
	// actRecord: it holds its rendered config but its status does not say
	// so (a day-0 machine not recorded yet, a failure that the spec undid):
	// the status is written, the node is not called.
	actRecord
	// actApply: the config must go to the node.
	actApply
	// actWait: its config is rendered for a Talos version the machine does
	// not run yet: it waits for the upgrade (whose end queues the tenant).
	actWait
	// actCheckBack: it holds its rendered config but was not back after the
	// reboot that config needed (ReasonNotBack): it is recorded as holding
	// it once it answers healthy.
	actCheckBack
)

func (a action) String() string {
	return [...]string{"none", "record", "apply", "wait", "check back"}[a]
}

// machineFacts are what the decision about one machine looks at.
type machineFacts struct {
	// Held is the hash of the config the machine holds (its annotation; "" unknown).
	Held string
	// Rendered is the hash of its rendered config.
	Rendered string
	// UpToDate and Condition are its status.configUpToDate and ConfigApplied condition.
	UpToDate  bool
	Condition *domain.Condition
	// Running is the Talos version the machine was last seen on
	// (status.talosVersion; "" not seen), Declared the one its config is
	// rendered for (its node group's, else the tenant's).
	Running, Declared string
}

// decideMachine says what a machine whose config rendered needs. A config
// rendered for another Talos version than the machine runs is not sent: the
// declared version changed and the upgrade that moves the machine comes
// first (a config of a newer contract may not load on the older Talos).
func decideMachine(f machineFacts) action {
	switch {
	case f.Held != f.Rendered && f.Running != "" && f.Declared != "" && f.Running != f.Declared:
		return actWait
	case f.Held != f.Rendered:
		return actApply
	case f.Condition != nil && f.Condition.Status == "False" && f.Condition.Reason == ReasonNotBack:
		return actCheckBack
	case !f.UpToDate || f.Condition == nil || f.Condition.Status != "True":
		return actRecord
	}
	return actNone
}

// recordReason is the ConfigApplied reason of a machine found holding its
// rendered config without an apply: the reason it already has when that says
// it took a config, else Day0 (what it holds came with it).
func recordReason(c *domain.Condition) string {
	if c != nil && c.Status == "True" && c.Reason != "" {
		return c.Reason
	}
	return talos.ReasonDay0
}

// wave is one node group's machines that the controller looks at together:
// at most parallelism of them are applied at once, and the next wave starts
// once this one is done.
type wave struct {
	group        string
	controlPlane bool
	parallelism  int
	machines     []domain.Machine
}

// planWaves orders a tenant's machines for a config rollout: control-plane
// groups first, then worker groups, each in name order; machines in name
// order within their group. Control-plane groups go one machine at a time,
// worker groups by updateStrategy.maxParallelism (at least 1). Machines
// without an address (not built yet), being deleted, or of a node group
// that is gone or being deleted are left out: nothing can or should take a
// config there.
func planWaves(groups map[string]*domain.NodeGroup, machines []domain.Machine) []wave {
	byGroup := map[string][]domain.Machine{}
	for _, m := range machines {
		ng, ok := groups[m.Spec.NodeGroup]
		if !ok || ng.Metadata.DeletionTimestamp != nil || m.Metadata.DeletionTimestamp != nil || m.Spec.Address == "" {
			continue
		}
		byGroup[m.Spec.NodeGroup] = append(byGroup[m.Spec.NodeGroup], m)
	}
	var out []wave
	for name, ms := range byGroup {
		ng := groups[name]
		w := wave{group: name, controlPlane: ng.Spec.Role == domain.RoleControlPlane, parallelism: max(ng.Spec.UpdateStrategy.MaxParallelism, 1), machines: ms}
		if w.controlPlane {
			w.parallelism = 1
		}
		slices.SortFunc(w.machines, func(a, b domain.Machine) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b wave) int {
		if a.controlPlane != b.controlPlane {
			if a.controlPlane {
				return -1
			}
			return 1
		}
		return strings.Compare(a.group, b.group)
	})
	return out
}

// waveEnd is how a wave went.
type waveEnd struct {
	// failed: a machine did not take its config (refused, unreachable).
	failed bool
	// heldBack: a control plane was not given its config because another
	// one is down; notBack: a control plane did not come back healthy
	// after a reboot within RebootTimeout.
	heldBack, notBack bool
}

// afterWave decides what a wave's end means for the rollout: whether the
// next waves go on, and whether the tenant is looked at again (backoff). A
// machine that refused its config stops nothing (the others go on); a
// control plane that is down stops the rollout, workers included, until a
// retry finds it up.
func afterWave(e waveEnd) (goOn, retry bool) {
	switch {
	case e.heldBack || e.notBack:
		return false, true
	case e.failed:
		return true, true
	}
	return true, false
}

// endpointKnown reports whether the tenant's configs can be rendered with the
// endpoint its machines were built with. Without a declared endpoint, a
// tenant built by tofu gets it from the apply (status.endpointAddress); until
// the apply records it, the first control plane's address is only a guess
// (a cloud's reserved address or load balancer is not a machine's), so the
// controller waits for it rather than apply configs with a wrong endpoint.
// Machines built otherwise (metal) have the first control plane's address as
// their endpoint.
func endpointKnown(t *domain.Tenant, machines []domain.Machine) bool {
	if t.Spec.ControlPlane.Endpoint != "" || t.Status.EndpointAddress != "" {
		return true
	}
	cp := false
	for _, m := range machines {
		if m.Metadata.Labels[domain.LabelManagedBy] == domain.ManagedByTofu {
			return false
		}
		cp = cp || (m.Spec.Role == domain.RoleControlPlane && m.Spec.Address != "")
	}
	return cp
}
