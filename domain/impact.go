package domain

import (
	"fmt"
	"slices"
	"strings"
)

// Impact before change: a dry run (?dryRun=All) of a write to a tenant, node
// group or config patch answers, besides the object as it would be stored,
// what the change would do to each machine.

// The actions a change takes on a machine.
const (
	ImpactNone        = "none"
	ImpactReconfigure = "reconfigure"
	ImpactReboot      = "reboot"
	// ImpactReimage: the machine is installed again from its group's new
	// installer at the Talos version it runs (a schematic change), through
	// the upgrade saga: drained, one at a time.
	ImpactReimage = "reimage"
	ImpactCreate  = "create"
	ImpactDestroy = "destroy"
)

// ChangeImpact is what a change would do to a tenant's machines.
type ChangeImpact struct {
	// Summary counts the machines by action.
	Summary  string          `json:"summary"`
	Machines []MachineImpact `json:"machines"`
	// Plan is tofu's plan of the change (node groups and tenants built by
	// tofu); PlanError says why there is none when one was asked.
	Plan      *ImpactPlan `json:"plan,omitempty"`
	PlanError string      `json:"planError,omitempty"`
}

// ImpactPlan is what `tofu plan` says a change would do to the
// infrastructure: counts as tofu counts them, and each resource change.
type ImpactPlan struct {
	Summary   string          `json:"summary"`
	Add       int             `json:"add"`
	Change    int             `json:"change"`
	Destroy   int             `json:"destroy"`
	Resources []DriftResource `json:"resources,omitempty"`
}

// MachineImpact is what a change would do to one machine.
type MachineImpact struct {
	Machine   string `json:"machine"`
	NodeGroup string `json:"nodeGroup"`
	// Action is none, reconfigure (in place), reboot, create or destroy.
	Action string `json:"action"`
	// ConfigChanges says whether the machine's rendered config changes.
	ConfigChanges bool `json:"configChanges"`
	// Reboot says whether Talos reboots the machine to take the config (its
	// own answer to a dry-run apply); Drain whether it is drained first.
	Reboot bool `json:"reboot"`
	Drain  bool `json:"drain"`
	// Details says more: why a reboot is unknown, what a section changes.
	Details string `json:"details,omitempty"`
}

// ImpactFacts are what the decision about one machine looks at.
type ImpactFacts struct {
	// Exists: the machine is there now; Wanted: its node group still wants
	// it after the change.
	Exists, Wanted bool
	// ConfigChanges: its rendered config differs after the change.
	ConfigChanges bool
	// Reboot is Talos's answer to a dry-run apply of the new config (nil: not
	// asked or no answer).
	Reboot *bool
	// Unanswered says why Reboot is nil for a changing config ("" when asked).
	Unanswered string
	// InstallChanges: the config's machine.install section changes.
	InstallChanges bool
	// Reimage: the group's schematic changes (FromSchematic to
	// ToSchematic), so the machine is re-imaged.
	Reimage                    bool
	FromSchematic, ToSchematic string
}

// DecideMachineImpact decides what a change does to one machine: a machine a
// group no longer wants is drained and destroyed; one it newly wants is
// created with a fresh config; a changed config is applied in place or with
// a reboot as Talos answers a dry run (a reboot drains first, as the config
// controller does); a config Talos was not asked about is reported as such.
func DecideMachineImpact(f ImpactFacts) MachineImpact {
	m := MachineImpact{ConfigChanges: f.ConfigChanges}
	switch {
	case !f.Exists && f.Wanted:
		m.Action, m.Details = ImpactCreate, "a new machine with a fresh config"
		return m
	case f.Exists && !f.Wanted:
		m.Action, m.Drain, m.Details = ImpactDestroy, true, "drained, its Node deleted, then destroyed"
		return m
	case !f.Exists:
		m.Action = ImpactNone
		return m
	case f.Reimage:
		m.Action, m.Reboot, m.Drain = ImpactReimage, true, true
		m.Details = fmt.Sprintf("re-imaged at the same Talos version by the upgrade saga, one machine at a time: schematic %.12s… → %.12s…", f.FromSchematic, f.ToSchematic)
		return m
	case !f.ConfigChanges:
		m.Action = ImpactNone
		return m
	case f.Reboot == nil:
		m.Action = ImpactReconfigure
		m.Details = "whether Talos reboots it is unknown: " + f.Unanswered
	case *f.Reboot:
		m.Action, m.Reboot, m.Drain = ImpactReboot, true, true
	default:
		m.Action = ImpactReconfigure
	}
	if f.InstallChanges {
		if m.Details != "" {
			m.Details += "; "
		}
		m.Details += "machine.install changes: Talos uses it at the next install or upgrade, not now"
	}
	return m
}

// ImpactSummary counts machines by action: "1 rebooted (drained first), 2
// reconfigured in place, 0 created, 1 destroyed, 3 unchanged".
func ImpactSummary(ms []MachineImpact) string {
	n := map[string]int{}
	for _, m := range ms {
		n[m.Action]++
	}
	parts := []string{
		fmt.Sprintf("%d rebooted (drained first)", n[ImpactReboot]),
		fmt.Sprintf("%d reconfigured in place", n[ImpactReconfigure]),
		fmt.Sprintf("%d created", n[ImpactCreate]),
		fmt.Sprintf("%d destroyed", n[ImpactDestroy]),
		fmt.Sprintf("%d unchanged", n[ImpactNone]),
	}
	if n[ImpactReimage] > 0 {
		parts = slices.Insert(parts, 1, fmt.Sprintf("%d re-imaged (drained first)", n[ImpactReimage]))
	}
	return strings.Join(parts, ", ")
}
