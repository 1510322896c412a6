package backup

import (
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// candidate is a control plane as the controller found it before a snapshot.
type candidate struct {
	Name, Address string
	// Healthy: its etcd member answered with no errors.
	Healthy bool
	// Leader: it is the etcd leader.
	Leader bool
}

// pickMember chooses the control plane to take a snapshot from: the first
// healthy member that is not the leader (a snapshot loads its member, and
// the leader has the cluster's writes to lead), else the healthy leader
// when it is the only healthy member; ok is false when none is healthy.
func pickMember(cands []candidate) (candidate, bool) {
	var leader *candidate
	for i := range cands {
		c := &cands[i]
		if !c.Healthy {
			continue
		}
		if !c.Leader {
			return *c, true
		}
		if leader == nil {
			leader = c
		}
	}
	if leader != nil {
		return *leader, true
	}
	return candidate{}, false
}

// dueSlot is the slot of the tenant's schedule that now falls in; ok is
// false when the tenant has no schedule (or is being deleted).
func dueSlot(t *domain.Tenant, now time.Time) (slot time.Time, ok bool) {
	if t == nil || t.Metadata.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	every := t.Spec.EtcdBackup.Every()
	if every <= 0 {
		return time.Time{}, false
	}
	return domain.BackupSlot(now, every), true
}

// byCreation orders objects oldest first (then by name).
func byCreation(a, b domain.ObjectMeta) int {
	var ta, tb time.Time
	if a.CreationTimestamp != nil {
		ta = *a.CreationTimestamp
	}
	if b.CreationTimestamp != nil {
		tb = *b.CreationTimestamp
	}
	if c := ta.Compare(tb); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// nextRestore is the restore to run: the oldest one not over and not
// being deleted.
func nextRestore(rs []domain.Restore) (domain.Restore, bool) {
	slices.SortFunc(rs, func(a, b domain.Restore) int { return byCreation(a.Metadata, b.Metadata) })
	for _, r := range rs {
		if !r.Status.Final() && r.Metadata.DeletionTimestamp == nil {
			return r, true
		}
	}
	return domain.Restore{}, false
}

// pendingBackups are the backups to take, oldest first: Pending ones, and
// Running ones (a run cut short: no run of the tenant is in flight when
// this is asked), not being deleted.
func pendingBackups(bs []domain.EtcdBackup) []domain.EtcdBackup {
	var out []domain.EtcdBackup
	for _, b := range bs {
		if !b.Status.Final() && b.Metadata.DeletionTimestamp == nil {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b domain.EtcdBackup) int { return byCreation(a.Metadata, b.Metadata) })
	return out
}

// retire names the backups retention deletes: the Succeeded ones beyond
// the newest keep (keep 0: no schedule, none of them), and Failed ones that
// ended more than domain.FailedBackupRetention before now. Backups being
// deleted already and those a restore in flight uses (inUse) stay.
func retire(bs []domain.EtcdBackup, keep int, now time.Time, inUse map[string]bool) []string {
	var ok []domain.EtcdBackup
	var out []string
	for _, b := range bs {
		if b.Metadata.DeletionTimestamp != nil || inUse[b.Metadata.Name] {
			continue
		}
		switch b.Status.Phase {
		case domain.BackupSucceeded:
			ok = append(ok, b)
		case domain.BackupFailed:
			end := b.Status.CompletedAt
			if end == nil {
				end = b.Metadata.CreationTimestamp
			}
			if end != nil && now.Sub(*end) > domain.FailedBackupRetention {
				out = append(out, b.Metadata.Name)
			}
		}
	}
	if keep <= 0 || len(ok) <= keep {
		return out
	}
	// Newest first by when they were taken.
	slices.SortFunc(ok, func(a, b domain.EtcdBackup) int { return -compareTaken(a, b) })
	for _, b := range ok[keep:] {
		out = append(out, b.Metadata.Name)
	}
	return out
}

func compareTaken(a, b domain.EtcdBackup) int {
	ta, tb := a.Status.CompletedAt, b.Status.CompletedAt
	if ta != nil && tb != nil {
		if c := ta.Compare(*tb); c != 0 {
			return c
		}
	}
	return byCreation(a.Metadata, b.Metadata)
}
