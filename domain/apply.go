package domain

import (
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ApplyKind is one OpenTofu run for a tenant, recorded by the apply worker:
// why it ran, how it went and what it changed. Its log is kept beside it.
var ApplyKind = register(&KindInfo{
	Kind: "Apply", Plural: "applies", Subject: "apply", TenantScoped: true,
	NormalizeSpec:   func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[ApplySpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[ApplyStatus](raw, "status") },
	InitialStatus: func() json.RawMessage {
		return json.RawMessage(`{"phase":"Queued","resources":{"added":0,"changed":0,"destroyed":0}}`)
	},
})

// Apply is the typed view of an Apply object.
type Apply struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   ObjectMeta  `json:"metadata"`
	Spec       ApplySpec   `json:"spec"`
	Status     ApplyStatus `json:"status"`
}

// Apply operations.
const (
	OperationApply   = "apply"
	OperationDestroy = "destroy"
)

// Apply phases. Succeeded, Failed and Canceled are final.
const (
	ApplyQueued    = "Queued"
	ApplyPlanning  = "Planning"
	ApplyApplying  = "Applying"
	ApplySucceeded = "Succeeded"
	ApplyFailed    = "Failed"
	ApplyCanceled  = "Canceled"
)

// Apply triggers.
const (
	TriggerChange = "change"
	TriggerResync = "resync"
	TriggerRetry  = "retry"
	TriggerDelete = "delete"
	// TriggerDrift : a drift check with action correct found the
	// infrastructure changed behind RezusCloud's back.
	TriggerDrift = "drift"
)

// MaxApplySources bounds the changes an apply lists as its cause.
const MaxApplySources = 20

// ApplySpec says what a run was for.
type ApplySpec struct {
	// Operation is apply or destroy.
	Operation string `json:"operation"`
	// Trigger is change, resync, retry, delete or drift.
	Trigger string `json:"trigger"`
	// Generation is the tenant's metadata.generation the run builds.
	Generation int64 `json:"generation"`
	// Sources are the changes that queued the run, newest last, as
	// "<Kind>/<name>@<resourceVersion>"; at most MaxApplySources.
	Sources []string `json:"sources,omitempty"`
}

// Default does nothing: the worker writes every field.
func (s *ApplySpec) Default() {}

// Validate reports every bad field.
func (s *ApplySpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Operation, f.Child("operation"), OperationApply, OperationDestroy)
	causes = append(causes, oneOf(s.Trigger, f.Child("trigger"), TriggerChange, TriggerResync, TriggerRetry, TriggerDelete, TriggerDrift)...)
	if s.Generation < 0 {
		causes = append(causes, Cause{Field: f.Child("generation").String(), Type: CauseInvalid, Message: "must not be negative"})
	}
	if len(s.Sources) > MaxApplySources {
		causes = append(causes, Cause{Field: f.Child("sources").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d sources", MaxApplySources)})
	}
	return causes
}

// ApplyResources counts what a run changed.
type ApplyResources struct {
	Added     int `json:"added"`
	Changed   int `json:"changed"`
	Destroyed int `json:"destroyed"`
}

// ApplyStatus is how the run went.
type ApplyStatus struct {
	Phase     string         `json:"phase"`
	StartTime *time.Time     `json:"startTime,omitempty"`
	EndTime   *time.Time     `json:"endTime,omitempty"`
	Resources ApplyResources `json:"resources"`
	// Error is the reason a failed run failed (tofu's error diagnostics).
	Error string `json:"error,omitempty"`
	// Attempt counts the runs since the last success (1 for the first).
	Attempt int `json:"attempt,omitempty"`
	// Replica is the replica that ran it (its heartbeat's holder name,
	// host-pid), so a run of a tenant shared out among replicas can be
	// traced to the process and log that ran it.
	Replica string `json:"replica,omitempty"`
	// Holder is Replica's earlier name, still written with the same value:
	// earlier releases and recorded histories read it.
	Holder string `json:"holder,omitempty"`
	// TofuMilliseconds is the time spent in tofu processes; the rest of the
	// run's wall time is RezusCloud's own (rendering, records, projection).
	TofuMilliseconds int64 `json:"tofuMilliseconds,omitempty"`
}

// RanOn is the replica that ran the run: Replica, or Holder for a run
// recorded before Replica existed.
func (s *ApplyStatus) RanOn() string {
	if s.Replica != "" {
		return s.Replica
	}
	return s.Holder
}

// MaxApplyErrorBytes bounds status.error.
const MaxApplyErrorBytes = 8 << 10

// Final reports whether the phase is final.
func (s *ApplyStatus) Final() bool {
	return s.Phase == ApplySucceeded || s.Phase == ApplyFailed || s.Phase == ApplyCanceled
}

// Default fills in a Queued phase.
func (s *ApplyStatus) Default() {
	if s.Phase == "" {
		s.Phase = ApplyQueued
	}
}

// Validate checks the status the worker wrote.
func (s *ApplyStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Phase, f.Child("phase"), ApplyQueued, ApplyPlanning, ApplyApplying, ApplySucceeded, ApplyFailed, ApplyCanceled)
	if s.Resources.Added < 0 || s.Resources.Changed < 0 || s.Resources.Destroyed < 0 {
		causes = append(causes, Cause{Field: f.Child("resources").String(), Type: CauseInvalid, Message: "counts must not be negative"})
	}
	if len(s.Error) > MaxApplyErrorBytes {
		causes = append(causes, Cause{Field: f.Child("error").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxApplyErrorBytes)})
	}
	return causes
}
