package domain

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds and defaults of a tenant's backup schedule.
const (
	// MinBackupInterval is the shortest interval: a snapshot loads etcd.
	MinBackupInterval = 5 * time.Minute
	// MaxBackupInterval is the longest (a year).
	MaxBackupInterval = 366 * 24 * time.Hour
	// MaxBackupKeep bounds how many backups a schedule keeps.
	MaxBackupKeep = 1000
	// DefaultBackupInterval and DefaultBackupKeep are a new tenant's schedule.
	DefaultBackupInterval = "24h"
	DefaultBackupKeep     = 7
	// FailedBackupRetention is how long failed backups are kept.
	FailedBackupRetention = 7 * 24 * time.Hour
)

// EtcdBackupSchedule is how often a tenant's etcd is backed up and how many
// backups are kept.
type EtcdBackupSchedule struct {
	// Interval between backups, a Go duration (6h, 90m) of at least 5m; empty
	// turns the schedule off.
	Interval string `json:"interval,omitempty"`
	// Keep is how many Succeeded backups retention keeps (the newest), 1 to
	// MaxBackupKeep; default DefaultBackupKeep when an interval is set.
	Keep int `json:"keep,omitempty"`
}

// Enabled reports whether backups are taken on a schedule.
func (s *EtcdBackupSchedule) Enabled() bool { return s != nil && s.Interval != "" }

// Every is the interval, 0 when the schedule is off (or invalid).
func (s *EtcdBackupSchedule) Every() time.Duration {
	if !s.Enabled() {
		return 0
	}
	d, err := time.ParseDuration(s.Interval)
	if err != nil {
		return 0
	}
	return d
}

// Default fills in Keep for a schedule with an interval.
func (s *EtcdBackupSchedule) Default() {
	if s.Interval != "" && s.Keep == 0 {
		s.Keep = DefaultBackupKeep
	}
}

// Validate reports every bad field.
func (s *EtcdBackupSchedule) Validate(f *field.Path) []Cause {
	var causes []Cause
	if s.Interval != "" {
		d, err := time.ParseDuration(s.Interval)
		switch {
		case err != nil:
			causes = append(causes, Cause{Field: f.Child("interval").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not a duration (e.g. 6h, 90m)", s.Interval)})
		case d < MinBackupInterval:
			causes = append(causes, Cause{Field: f.Child("interval").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be at least %s, got %s", MinBackupInterval, s.Interval)})
		case d > MaxBackupInterval:
			causes = append(causes, Cause{Field: f.Child("interval").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be at most %s, got %s", MaxBackupInterval, s.Interval)})
		}
	}
	switch {
	case s.Keep < 0 || s.Keep > MaxBackupKeep:
		causes = append(causes, Cause{Field: f.Child("keep").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 1 and %d, got %d", MaxBackupKeep, s.Keep)})
	case s.Keep > 0 && s.Interval == "":
		causes = append(causes, Cause{Field: f.Child("interval").String(), Type: CauseRequired, Message: "keep needs an interval; leave both out to turn the schedule off"})
	}
	return causes
}

// BackupSlot is the slot of the schedule with interval every that now falls
// in: slots are the multiples of every since the Unix epoch, so every replica
// and every restart computes the same ones.
func BackupSlot(now time.Time, every time.Duration) time.Time {
	if every <= 0 {
		return time.Time{}
	}
	n := now.UTC().UnixNano()
	return time.Unix(0, n-n%int64(every)).UTC()
}
