package upgrade

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// The pure decisions of the upgrade saga, kept apart from the calls it makes
// so they can be table-tested: the order machines go in, whether a run may
// start, and what a step does next given what was recorded and what the node
// says now.

// planUpgrade lists the run's steps in order: control planes first, one at a
// time and the etcd leader last of them, then workers by node group and name.
// A machine already on the target is Done from the start. from maps machine
// names to the version each runs.
func planUpgrade(machines []domain.Machine, to, leader string, from map[string]string) []domain.UpgradeMachine {
	ms := append([]domain.Machine(nil), machines...)
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if (a.Spec.Role == domain.RoleControlPlane) != (b.Spec.Role == domain.RoleControlPlane) {
			return a.Spec.Role == domain.RoleControlPlane
		}
		if (a.Metadata.Name == leader) != (b.Metadata.Name == leader) {
			return b.Metadata.Name == leader
		}
		if a.Spec.NodeGroup != b.Spec.NodeGroup {
			return a.Spec.NodeGroup < b.Spec.NodeGroup
		}
		return a.Metadata.Name < b.Metadata.Name
	})
	out := make([]domain.UpgradeMachine, 0, len(ms))
	for _, m := range ms {
		e := domain.UpgradeMachine{Name: m.Metadata.Name, NodeGroup: m.Spec.NodeGroup, Role: m.Spec.Role,
			From: from[m.Metadata.Name], To: to, Phase: domain.StepPending}
		if e.From == to {
			e.Phase = domain.StepDone
		}
		out = append(out, e)
	}
	return out
}

// withSchematics gives a Talos run's steps the schematics: the one each
// machine runs (from, by name; "" when it reports none) and the one its node
// group declares (to; "" when the group names its own installImage). A
// machine on the target version that runs another schematic than its group
// declares is not Done: the run installs it again, with the group's
// installer (a re-image).
func withSchematics(steps []domain.UpgradeMachine, from, to map[string]string) []domain.UpgradeMachine {
	for i := range steps {
		s := &steps[i]
		s.ToSchematic = to[s.Name]
		if s.ToSchematic == "" {
			continue
		}
		s.FromSchematic = from[s.Name]
		if s.FromSchematic == "" {
			s.FromSchematic = domain.VanillaSchematic
		}
		if s.Phase == domain.StepDone && !domain.SchematicMatches(s.FromSchematic, s.ToSchematic) {
			s.Phase = domain.StepPending
		}
	}
	return steps
}

// upgradePathProblems explains why the run may not start ("" when it may): a
// machine whose move the rule refuses (problem: from, to → why, as
// talos.TalosUpgradeProblem: a downgrade across a minor version, a skipped
// one, a target that does not run the configs' Kubernetes version).
func upgradePathProblems(steps []domain.UpgradeMachine, problem func(from, to string) string) string {
	var bad []string
	for _, s := range steps {
		if s.From == s.To {
			continue
		}
		if p := problem(s.From, s.To); p != "" {
			bad = append(bad, s.Name+": "+p)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	const shown = 5
	more := ""
	if len(bad) > shown {
		more = fmt.Sprintf(" (and %d more machines)", len(bad)-shown)
		bad = bad[:shown]
	}
	return "refused: " + strings.Join(bad, "; ") + more
}

// stepAction is what a step does next.
type stepAction int

const (
	// actUpgrade: call the upgrade API (control planes after the quorum check).
	actUpgrade stepAction = iota
	// actWait: wait for the node to reboot into the target.
	actWait
	// actVerify: wait for the node to be healthy on the target.
	actVerify
	// actRollback: bring the node back to its previous version.
	actRollback
	// actNone: the step is over.
	actNone
)

func (a stepAction) String() string {
	return [...]string{"upgrade", "wait", "verify", "rollback", "none"}[a]
}

// nextStepAction decides how a step goes on from its recorded phase and what the
// node answers now (observed is "" when it cannot be reached). It is what
// makes a step safe to run twice: after a restart, a node that went down or
// came back on the target is not asked to upgrade again.
func nextStepAction(s domain.UpgradeMachine, observed string) stepAction {
	reachable := observed != ""
	switch s.Phase {
	case domain.StepDone, domain.StepRolledBack, domain.StepFailed:
		return actNone
	case domain.StepRollingBack:
		return actRollback
	case domain.StepVerifying:
		return actVerify
	}
	switch {
	case reachable && observed == stepTarget(s):
		return actVerify
	case s.Phase == domain.StepPending || s.Phase == domain.StepDraining:
		// Untouched (a drain does not touch the machine): an unreachable
		// node is the quorum check's and the upgrade call's to report.
		return actUpgrade
	case !reachable:
		// Upgrading or Rebooting and down: the call got through.
		return actWait
	case s.Phase == domain.StepUpgrading:
		// Still on the old version and up: the call did not get through (a
		// node that takes it goes down to install).
		return actUpgrade
	}
	// Rebooting and up on the old version: it has not gone down yet, or came
	// back without the upgrade; waiting tells them apart or times out.
	return actWait
}

// etcdQuorumProblem says why taking member self down would lose etcd quorum ("" when
// it would not): quorum is a majority of the members, and every member but
// self that must stay up has to be healthy. unhealthy maps members' names to
// their problem. A single-member cluster cannot keep quorum through a reboot
// of its only member and is allowed to go down.
func etcdQuorumProblem(self string, members []string, unhealthy map[string]string) string {
	if len(members) <= 1 {
		return ""
	}
	quorum := len(members)/2 + 1
	healthy := 0
	var bad []string
	for _, m := range members {
		if m == self {
			continue
		}
		if p, ok := unhealthy[m]; ok {
			bad = append(bad, m+" ("+p+")")
			continue
		}
		healthy++
	}
	if healthy >= quorum {
		return ""
	}
	sort.Strings(bad)
	return fmt.Sprintf("etcd quorum would not survive taking %s down: %d of the other %d members healthy, %d needed; unhealthy: %s",
		self, healthy, len(members)-1, quorum, strings.Join(bad, ", "))
}
