package domain

import (
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RestoreKind is one recovery of a tenant's etcd from an EtcdBackup, run by
// the backup controller: it checks the backup's object opens whole, uploads
// the snapshot to the first control plane and bootstraps etcd there from it
// (Talos EtcdRecover and Bootstrap with recover_etcd), waits for the other
// control planes to join, and checks etcd holds the snapshot's revision.
// POST /api/v1/tenants/{t}/restore {"backup": "<name>"} creates one.
var RestoreKind = register(&KindInfo{
	Kind: "Restore", Plural: "restores", Subject: "restore", TenantScoped: true,
	NormalizeSpec:   func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[RestoreSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[RestoreStatus](raw, "status") },
	InitialStatus:   func() json.RawMessage { return json.RawMessage(`{"phase":"Pending"}`) },
})

// Restore is the typed view of a Restore object.
type Restore struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   ObjectMeta    `json:"metadata"`
	Spec       RestoreSpec   `json:"spec"`
	Status     RestoreStatus `json:"status"`
}

// Restore phases (Succeeded and Failed are final) and the stages of a
// running one, in order. Each stage is safe to run again, so a run cut
// short resumes at the stage it recorded.
const (
	RestorePending   = "Pending"
	RestoreRunning   = "Running"
	RestoreSucceeded = "Succeeded"
	RestoreFailed    = "Failed"

	// StageVerifying reads the whole backup object: it must open (not
	// altered, not cut short) and match the backup's size and sha256.
	// Nothing on the nodes changes before it passed.
	StageVerifying = "Verifying"
	// StageRecovering uploads the snapshot to the first control plane and
	// bootstraps etcd there from it.
	StageRecovering = "Recovering"
	// StageJoining waits for every control plane to be an etcd member again.
	StageJoining = "Joining"
	// StageChecking checks etcd holds the snapshot's revision.
	StageChecking = "Checking"
)

// RestoreSpec names the backup to restore.
type RestoreSpec struct {
	// Backup is the name of an EtcdBackup of the same tenant that Succeeded.
	Backup string `json:"backup"`
	// Deadlines overrides how long the stages that wait may wait before
	// the restore fails; absent stages take the server's default.
	Deadlines *RestoreDeadlines `json:"deadlines,omitempty"`
}

// RestoreDeadlines are the deadlines of a restore's waiting stages: Go
// durations between MinStepDeadline and MaxStepDeadline, "" for the
// server's default (its JoinTimeout, 10m unless configured).
type RestoreDeadlines struct {
	// Join bounds the wait for every control plane to serve etcd again
	// (stage Joining): a large snapshot on slow disks takes longer.
	Join string `json:"join,omitempty"`
	// Check bounds the wait for every member to be healthy at the
	// snapshot's revision (stage Checking).
	Check string `json:"check,omitempty"`
}

// Duration is the deadline of stage (StageJoining, StageChecking) the spec
// sets, or def when it sets none.
func (d *RestoreDeadlines) Duration(stage string, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	v := map[string]string{StageJoining: d.Join, StageChecking: d.Check}[stage]
	if x, err := time.ParseDuration(v); err == nil && v != "" {
		return x
	}
	return def
}

// Default does nothing.
func (s *RestoreSpec) Default() {}

// Validate reports every bad field.
func (s *RestoreSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	var causes []Cause
	if s.Backup == "" {
		causes = append(causes, Cause{Field: f.Child("backup").String(), Type: CauseRequired, Message: "name the EtcdBackup to restore"})
	} else {
		causes = append(causes, ValidateName(s.Backup, f.Child("backup").String())...)
	}
	if d := s.Deadlines; d != nil {
		causes = append(causes, ValidateStepDeadline(d.Join, f.Child("deadlines", "join"))...)
		causes = append(causes, ValidateStepDeadline(d.Check, f.Child("deadlines", "check"))...)
	}
	return causes
}

// RestoreStatus is the run's progress, written by the backup controller.
type RestoreStatus struct {
	Phase string `json:"phase"`
	// Stage is the stage the run is in or last reached.
	Stage string `json:"stage,omitempty"`
	// Member is the control plane etcd was recovered on.
	Member string `json:"member,omitempty"`
	// EtcdRevision is the revision the snapshot holds (when known) and the
	// one etcd was found at afterwards.
	EtcdRevision int64 `json:"etcdRevision,omitempty"`
	// Members counts the control planes that are etcd members again.
	Members     int        `json:"members,omitempty"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	// Reason says why the run failed, or what a stage waits for.
	Reason string `json:"reason,omitempty"`
	// Wait is what the running stage waits for (Joining, Checking), since
	// when and until when; absent when it waits for nothing. A run resumed
	// after a restart keeps its deadline.
	Wait *StepWait `json:"wait,omitempty"`
}

// Final reports whether the run is over.
func (s *RestoreStatus) Final() bool {
	return s.Phase == RestoreSucceeded || s.Phase == RestoreFailed
}

// Default fills in a Pending phase.
func (s *RestoreStatus) Default() {
	if s.Phase == "" {
		s.Phase = RestorePending
	}
}

// Validate checks the status the controller wrote.
func (s *RestoreStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Phase, f.Child("phase"), RestorePending, RestoreRunning, RestoreSucceeded, RestoreFailed)
	if s.Stage != "" {
		causes = append(causes, oneOf(s.Stage, f.Child("stage"), StageVerifying, StageRecovering, StageJoining, StageChecking)...)
	}
	if s.Member != "" {
		causes = append(causes, ValidateName(s.Member, f.Child("member").String())...)
	}
	if s.EtcdRevision < 0 || s.Members < 0 {
		causes = append(causes, Cause{Field: f.Child("etcdRevision").String(), Type: CauseInvalid, Message: "must not be negative"})
	}
	if len(s.Reason) > MaxBackupReasonBytes {
		causes = append(causes, Cause{Field: f.Child("reason").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxBackupReasonBytes)})
	}
	if s.Wait != nil {
		causes = append(causes, s.Wait.Validate(f.Child("wait"))...)
	}
	return causes
}
