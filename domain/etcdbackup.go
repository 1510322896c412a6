package domain

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// EtcdBackupKind is one etcd snapshot of a tenant, taken through the Talos
// API by the backup controller and kept sealed in the rezus-etcd-backups
// object store. A user creates one (take a backup now), or the tenant's
// schedule does (spec.etcdBackup of the tenant).
var EtcdBackupKind = register(&KindInfo{
	Kind: "EtcdBackup", Plural: "etcdbackups", Subject: "etcdbackup", TenantScoped: true,
	NormalizeSpec: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[EtcdBackupSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) {
		return normalizeAs[EtcdBackupStatus](raw, "status")
	},
	InitialStatus: func() json.RawMessage { return json.RawMessage(`{"phase":"Pending"}`) },
})

// EtcdBackup is the typed view of an EtcdBackup object.
type EtcdBackup struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Metadata   ObjectMeta       `json:"metadata"`
	Spec       EtcdBackupSpec   `json:"spec"`
	Status     EtcdBackupStatus `json:"status"`
}

// Backup phases. Succeeded and Failed are final.
const (
	BackupPending   = "Pending"
	BackupRunning   = "Running"
	BackupSucceeded = "Succeeded"
	BackupFailed    = "Failed"
)

// Backup triggers.
const (
	BackupManual   = "manual"
	BackupSchedule = "schedule"
)

// BackupObjectFinalizer holds an EtcdBackup until the backup controller has
// deleted its object from the bucket.
const BackupObjectFinalizer = "rezuscloud.io/etcd-backup-object"

// MaxBackupReasonBytes bounds status.reason.
const MaxBackupReasonBytes = 4 << 10

// EtcdBackupSpec says why a backup was taken.
type EtcdBackupSpec struct {
	// Trigger is manual (a user asked) or schedule; default manual.
	Trigger string `json:"trigger"`
	// Slot is the schedule's slot a scheduled backup stands for (the start
	// of its interval); scheduled backups only.
	Slot *time.Time `json:"slot,omitempty"`
}

// Default fills in the manual trigger.
func (s *EtcdBackupSpec) Default() {
	if s.Trigger == "" {
		s.Trigger = BackupManual
	}
	if s.Slot != nil {
		t := s.Slot.UTC()
		s.Slot = &t
	}
}

// Validate reports every bad field.
func (s *EtcdBackupSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Trigger, f.Child("trigger"), BackupManual, BackupSchedule)
	switch {
	case s.Trigger == BackupSchedule && s.Slot == nil:
		causes = append(causes, Cause{Field: f.Child("slot").String(), Type: CauseRequired, Message: "a scheduled backup names its slot"})
	case s.Trigger == BackupManual && s.Slot != nil:
		causes = append(causes, Cause{Field: f.Child("slot").String(), Type: CauseForbidden, Message: "only scheduled backups have a slot"})
	}
	return causes
}

// EtcdBackupStatus is how the backup went, written by the backup controller.
type EtcdBackupStatus struct {
	Phase string `json:"phase"`
	// Size is the snapshot's length in bytes (as etcd streamed it, before sealing).
	Size int64 `json:"size,omitempty"`
	// SHA256 is the hex SHA-256 of the snapshot as etcd streamed it.
	SHA256 string `json:"sha256,omitempty"`
	// EtcdRevision is etcd's store revision the snapshot holds, when the
	// snapshot's format shows it (the emulator's does; a real etcd's bolt
	// database is not read, so it stays empty).
	EtcdRevision int64 `json:"etcdRevision,omitempty"`
	// Member is the control-plane machine the snapshot was taken from.
	Member string `json:"member,omitempty"`
	// StoredSize is the sealed object's length in the bucket.
	StoredSize  int64      `json:"storedSize,omitempty"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	// Reason says why a backup failed (or why a pending one waits).
	Reason string `json:"reason,omitempty"`
}

// Final reports whether the backup is over.
func (s *EtcdBackupStatus) Final() bool {
	return s.Phase == BackupSucceeded || s.Phase == BackupFailed
}

// Default fills in a Pending phase.
func (s *EtcdBackupStatus) Default() {
	if s.Phase == "" {
		s.Phase = BackupPending
	}
	s.SHA256 = strings.ToLower(s.SHA256)
}

// Validate checks the status the controller wrote.
func (s *EtcdBackupStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Phase, f.Child("phase"), BackupPending, BackupRunning, BackupSucceeded, BackupFailed)
	if s.Size < 0 {
		causes = append(causes, Cause{Field: f.Child("size").String(), Type: CauseInvalid, Message: "must not be negative"})
	}
	if s.StoredSize < 0 {
		causes = append(causes, Cause{Field: f.Child("storedSize").String(), Type: CauseInvalid, Message: "must not be negative"})
	}
	if s.EtcdRevision < 0 {
		causes = append(causes, Cause{Field: f.Child("etcdRevision").String(), Type: CauseInvalid, Message: "must not be negative"})
	}
	if s.SHA256 != "" {
		if b, err := hex.DecodeString(s.SHA256); err != nil || len(b) != 32 {
			causes = append(causes, Cause{Field: f.Child("sha256").String(), Type: CauseInvalid, Message: "must be 64 hex digits"})
		}
	}
	if s.Member != "" {
		causes = append(causes, ValidateName(s.Member, f.Child("member").String())...)
	}
	if len(s.Reason) > MaxBackupReasonBytes {
		causes = append(causes, Cause{Field: f.Child("reason").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxBackupReasonBytes)})
	}
	return causes
}

// ScheduledBackupName is the name of the scheduled backup of slot: the same
// slot always gives the same name, so a scheduler that runs twice (after a
// restart, or on two replicas) creates it once (the second create is
// AlreadyExists).
func ScheduledBackupName(slot time.Time) string {
	return "sched-" + slot.UTC().Format("20060102-1504")
}
