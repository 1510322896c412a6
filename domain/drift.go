package domain

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Drift checks: on an interval, the apply worker plans a tenant's
// infrastructure (`tofu plan -detailed-exitcode`) and compares each
// machine's running config with the declared one. What it finds is the
// tenant's status.drift and its Drifted condition; with action correct it
// applies instead of only reporting.

// The actions of a drift check.
const (
	// DriftReport records what drifted and changes nothing (the default).
	DriftReport = "report"
	// DriftCorrect applies the declared infrastructure and has the config
	// controller reapply the declared configs.
	DriftCorrect = "correct"
)

// Bounds of a tenant's drift-check interval. A server may raise the lower
// one (its --drift-min-interval): the status shows the interval in force.
const (
	MinDriftInterval = 10 * time.Second
	MaxDriftInterval = 31 * 24 * time.Hour
	// MaxDriftResources bounds the resources status.drift lists (the counts
	// stay exact).
	MaxDriftResources = 100
	// MaxDriftMachines bounds the machines status.drift lists.
	MaxDriftMachines = 100
)

// ConditionDrifted is the tenant condition a drift check sets: True when
// the infrastructure or a machine's config differs from the declared one,
// False when none does, Unknown when the check failed.
const ConditionDrifted = "Drifted"

// Reasons of the Drifted condition.
const (
	ReasonInSync                = "InSync"
	ReasonApplied               = "Applied"
	ReasonInfrastructureDrifted = "InfrastructureDrifted"
	ReasonConfigDrifted         = "ConfigDrifted"
	ReasonDrifted               = "Drifted"
	ReasonDriftCheckFailed      = "CheckFailed"
)

// DriftCheck is how a tenant's drift is checked: absent, the server's
// default interval (--drift-interval) and action report.
type DriftCheck struct {
	// Interval between two checks, a Go duration (30m, 4h); empty: the
	// server's default.
	Interval string `json:"interval,omitempty"`
	// Action is report (the default) or correct.
	Action string `json:"action,omitempty"`
}

// Every is the interval, 0 when unset (or invalid).
func (d *DriftCheck) Every() time.Duration {
	if d == nil || d.Interval == "" {
		return 0
	}
	v, err := time.ParseDuration(d.Interval)
	if err != nil {
		return 0
	}
	return v
}

// Corrects reports whether drift is corrected rather than reported.
func (d *DriftCheck) Corrects() bool { return d != nil && d.Action == DriftCorrect }

// Default fills the action in.
func (d *DriftCheck) Default() {
	if d.Action == "" {
		d.Action = DriftReport
	}
}

// Validate reports every bad field.
func (d *DriftCheck) Validate(f *field.Path) []Cause {
	var causes []Cause
	if d.Interval != "" {
		v, err := time.ParseDuration(d.Interval)
		switch {
		case err != nil:
			causes = append(causes, Cause{Field: f.Child("interval").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not a duration (e.g. 30m, 4h)", d.Interval)})
		case v < MinDriftInterval:
			causes = append(causes, Cause{Field: f.Child("interval").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be at least %s, got %s", MinDriftInterval, d.Interval)})
		case v > MaxDriftInterval:
			causes = append(causes, Cause{Field: f.Child("interval").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be at most %s, got %s", MaxDriftInterval, d.Interval)})
		}
	}
	if d.Action != "" {
		causes = append(causes, oneOf(d.Action, f.Child("action"), DriftReport, DriftCorrect)...)
	}
	return causes
}

// DriftStatus is what the last drift check of a tenant found.
type DriftStatus struct {
	// CheckedAt is when the last check (or successful apply) ended.
	CheckedAt *time.Time `json:"checkedAt,omitempty"`
	// Interval and Action are those in force: the spec's, the server's
	// default, or the server's minimum where the spec asks for less.
	Interval string `json:"interval,omitempty"`
	Action   string `json:"action,omitempty"`
	// Summary is one line: "1 to add, 0 to change, 1 to destroy; workers-1
	// config differs".
	Summary string `json:"summary,omitempty"`
	// Add, Change and Destroy count the plan's resource changes (a replace
	// counts in Add and Destroy, as tofu counts it).
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
	// Resources are the plan's changes, at most MaxDriftResources.
	Resources []DriftResource `json:"resources,omitempty"`
	// Machines are the machines whose running config differs from the
	// declared one, at most MaxDriftMachines.
	Machines []MachineDrift `json:"machines,omitempty"`
	// Correction is the apply a check with action correct queued ("" none).
	Correction string `json:"correction,omitempty"`
	// Error says why the last check failed ("" when it did not).
	Error string `json:"error,omitempty"`
}

// DriftResource is one resource change of a drift plan.
type DriftResource struct {
	// Address is tofu's resource address.
	Address string `json:"address"`
	// Action is tofu's: create, update, delete, replace, …
	Action string `json:"action"`
}

// MachineDrift is a machine whose running config is not the declared one.
type MachineDrift struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Drifted reports whether the check found anything.
func (s *DriftStatus) Drifted() bool {
	return s != nil && (s.Add+s.Change+s.Destroy > 0 || len(s.Machines) > 0)
}

// DriftSummary is the one-line summary of a drift check: the plan's counts,
// then the machines whose configs differ.
func DriftSummary(add, change, destroy int, machines []MachineDrift) string {
	s := fmt.Sprintf("%d to add, %d to change, %d to destroy", add, change, destroy)
	if len(machines) == 0 {
		return s
	}
	names := make([]string, 0, len(machines))
	for _, m := range machines {
		names = append(names, m.Name)
	}
	verb := "config differs"
	if len(machines) > 1 {
		verb = "configs differ"
	}
	return s + "; " + strings.Join(names, ", ") + " " + verb
}

// DriftCondition is the Drifted condition of a check's result.
func DriftCondition(s *DriftStatus) Condition {
	c := Condition{Type: ConditionDrifted}
	infra := s.Add+s.Change+s.Destroy > 0
	switch {
	case s.Error != "":
		c.Status, c.Reason, c.Message = "Unknown", ReasonDriftCheckFailed, s.Error
	case infra && len(s.Machines) > 0:
		c.Status, c.Reason, c.Message = "True", ReasonDrifted, s.Summary
	case infra:
		c.Status, c.Reason, c.Message = "True", ReasonInfrastructureDrifted, s.Summary
	case len(s.Machines) > 0:
		c.Status, c.Reason, c.Message = "True", ReasonConfigDrifted, s.Summary
	default:
		c.Status, c.Reason, c.Message = "False", ReasonInSync, "the infrastructure and the machines' configs are as declared"
	}
	if s.Correction != "" && c.Status == "True" {
		c.Message += "; correcting with apply " + s.Correction
	}
	return c
}

// DriftSchedule is the drift check in force for a tenant: its spec's, else
// the server's defaults; an interval below the server's minimum is raised
// to it. Every is 0 when checks are off for the tenant.
type DriftSchedule struct {
	Every  time.Duration
	Action string
}

// DriftScheduleOf decides the schedule of a tenant's checks from its spec and
// the server's default interval (0: tenants without spec.driftCheck are not
// checked) and minimum.
func DriftScheduleOf(spec *DriftCheck, defaultEvery, minEvery time.Duration) DriftSchedule {
	s := DriftSchedule{Every: defaultEvery, Action: DriftReport}
	if spec != nil {
		if v := spec.Every(); v > 0 {
			s.Every = v
		}
		if spec.Action != "" {
			s.Action = spec.Action
		}
	}
	if s.Every > 0 && s.Every < minEvery {
		s.Every = minEvery
	}
	return s
}

// DriftDue decides whether a tenant's drift check is due at now: checks run
// only on a tenant whose current spec was applied successfully (a tenant with
// changes pending or a failed apply has its apply queued, and its plan would
// show the pending change, not drift), every sched.Every after the last
// check or successful apply.
func DriftDue(sched DriftSchedule, applied bool, last *time.Time, now time.Time) bool {
	switch {
	case sched.Every <= 0 || !applied:
		return false
	case last == nil:
		return true
	}
	return !now.Before(last.Add(sched.Every))
}
