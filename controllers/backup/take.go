package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// take takes a backup: it marks it Running, picks a control plane, streams
// its snapshot into the bucket (sealed as it streams; the object exists
// only once the whole snapshot passed its own check), and records the
// outcome. A backup found Running was cut short (a crash): it is taken
// again from the start, and the object of the same name is replaced only
// once the new one is whole. It answers an error only when the run should
// be retried (the store failed, or the run was stopped); a backup that
// cannot be taken is recorded Failed.
func (c *Controller) take(ctx context.Context, b domain.EtcdBackup) error {
	ref := domain.ObjectRef(domain.EtcdBackupKind, b.Metadata.Tenant, b.Metadata.Name)
	started := c.cfg.Clock.Now().UTC()
	if err := c.backupStatus(ctx, ref, func(st *domain.EtcdBackupStatus) {
		*st = domain.EtcdBackupStatus{Phase: domain.BackupRunning, StartedAt: &started}
	}); err != nil {
		return err
	}
	fail := func(reason string) error {
		done := c.cfg.Clock.Now().UTC()
		return c.backupStatus(ctx, ref, func(st *domain.EtcdBackupStatus) {
			st.Phase, st.Reason, st.CompletedAt = domain.BackupFailed, truncate(reason), &done
		})
	}
	if !c.hasMachines(b.Metadata.Tenant) {
		return fail("the tenant has no machines: there is no etcd to back up")
	}
	bundle, err := c.cfg.PKI.Bundle(ctx, b.Metadata.Tenant)
	if err != nil {
		return fmt.Errorf("loading the PKI of %s: %w", b.Metadata.Tenant, err)
	}
	member, why := c.chooseMember(ctx, bundle, b.Metadata.Tenant)
	if member.Name == "" {
		return fail(why)
	}
	c.cfg.Log.Info("taking an etcd backup", "tenant", b.Metadata.Tenant, "backup", b.Metadata.Name, "member", member.Name)
	res, err := c.snapshotInto(ctx, bundle, member.Address, objectOf(b))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // stopped: the next leader takes it again
		}
		if errors.Is(err, ErrStore) {
			return err
		}
		return fail(fmt.Sprintf("snapshot from %s: %v", member.Name, err))
	}
	done := c.cfg.Clock.Now().UTC()
	return c.backupStatus(ctx, ref, func(st *domain.EtcdBackupStatus) {
		*st = domain.EtcdBackupStatus{Phase: domain.BackupSucceeded, Size: res.size, SHA256: res.sha256,
			EtcdRevision: res.revision, Member: member.Name, StoredSize: int64(res.stored),
			StartedAt: &started, CompletedAt: &done}
	})
}

// ErrStore marks a failure of the store (retried) rather than of the
// snapshot or the backup's object.
var ErrStore = errors.New("backup store")

type snapshotResult struct {
	size     int64
	sha256   string
	revision int64
	stored   uint64
}

// snapshotInto streams the snapshot of the control plane at address into
// the object: one pass, no copy held in memory beyond a chunk (one goes to
// a file, for the revision: revision.go).
func (c *Controller) snapshotInto(ctx context.Context, bundle *secrets.Bundle, address, object string) (snapshotResult, error) {
	rc, err := c.cfg.Nodes.EtcdSnapshot(ctx, bundle, address)
	if err != nil {
		return snapshotResult{}, err
	}
	defer rc.Close()
	h := sha256.New()
	var n countWriter
	spool := newSpoolFile(c.cfg.TempDir)
	stored, err := c.cfg.Backups.Put(ctx, object, snapshotReader{io.TeeReader(rc, io.MultiWriter(h, &n, spool))})
	if err != nil {
		spool.discard()
		if isSnapshotError(err) {
			return snapshotResult{}, err
		}
		return snapshotResult{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	rev, _ := spool.revision()
	return snapshotResult{size: int64(n), sha256: hex.EncodeToString(h.Sum(nil)), revision: rev, stored: stored}, nil
}

// isSnapshotError reports whether a put failed because of what it read
// (the snapshot stream) rather than because of the store.
func isSnapshotError(err error) bool {
	var se snapshotReadError
	return errors.As(err, &se)
}

type snapshotReadError struct{ error }

// snapshotReader marks the errors of the snapshot stream (a call that
// failed, a snapshot cut short or damaged: talos.ErrSnapshotDamaged).
type snapshotReader struct{ r io.Reader }

func (s snapshotReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = snapshotReadError{err}
	}
	return n, err
}

func (e snapshotReadError) Unwrap() error { return e.error }

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

// controlPlanes are the tenant's control-plane machines with an address,
// by name.
func (c *Controller) controlPlanes(tenant string) ([]domain.Machine, error) {
	ms, err := projections.List[domain.Machine](c.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	ms = slices.DeleteFunc(ms, func(m domain.Machine) bool {
		return m.Spec.Role != domain.RoleControlPlane || m.Spec.Address == "" || m.Metadata.DeletionTimestamp != nil
	})
	slices.SortFunc(ms, func(a, b domain.Machine) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	return ms, nil
}

// chooseMember asks every control plane for its etcd member's status and
// picks one (pickMember); why says what was wrong when none is healthy.
func (c *Controller) chooseMember(ctx context.Context, bundle *secrets.Bundle, tenant string) (candidate, string) {
	cps, err := c.controlPlanes(tenant)
	if err != nil {
		return candidate{}, err.Error()
	}
	if len(cps) == 0 {
		return candidate{}, "the tenant has no control plane with an address"
	}
	var cands []candidate
	var problems []string
	for _, m := range cps {
		cand := candidate{Name: m.Metadata.Name, Address: m.Spec.Address}
		st, err := c.cfg.Nodes.EtcdStatus(ctx, bundle, m.Spec.Address)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", m.Metadata.Name, err))
		case len(st.Errors) > 0:
			problems = append(problems, fmt.Sprintf("%s: %s", m.Metadata.Name, strings.Join(st.Errors, "; ")))
		default:
			cand.Healthy, cand.Leader = true, st.Leader()
		}
		cands = append(cands, cand)
	}
	if m, ok := pickMember(cands); ok {
		return m, ""
	}
	return candidate{}, "no control plane has a healthy etcd member: " + strings.Join(problems, "; ")
}

// backupStatus writes a backup's status through mutate.
func (c *Controller) backupStatus(ctx context.Context, ref domain.Ref, mutate func(st *domain.EtcdBackupStatus)) error {
	res, err := eventstore.UpdateStatus(ctx, c.sw, ref, func(_ *domain.Object, st *domain.EtcdBackupStatus) (bool, error) {
		mutate(st)
		return true, nil
	})
	if err != nil {
		return err
	}
	return c.cfg.Cache.WaitFor(ctx, res.Seq)
}

// truncate bounds a reason to what the status takes.
func truncate(s string) string {
	if len(s) <= domain.MaxBackupReasonBytes {
		return s
	}
	return s[:domain.MaxBackupReasonBytes-len("…")] + "…"
}
