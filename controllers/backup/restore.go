package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/talos/etcdsnapshot"
)

// restore runs a Restore from the stage it recorded: Verifying (the whole
// object opens and matches the backup; nothing on the nodes changes before
// it passed), Recovering (upload to the first control plane and bootstrap
// etcd there from it), Joining (every control plane an etcd member again),
// Checking (etcd holds the snapshot's revision). Each stage is safe to run
// again, so a run cut short (kill -9) resumes where it was. It answers an
// error only when the run should be retried; a restore that cannot go on is
// recorded Failed with the reason.
func (c *Controller) restore(ctx context.Context, rs domain.Restore) error {
	tenant := rs.Metadata.Tenant
	ref := domain.ObjectRef(domain.RestoreKind, tenant, rs.Metadata.Name)
	log := c.cfg.Log.With("tenant", tenant, "restore", rs.Metadata.Name)
	st, err := c.storedStatus(ctx, ref, rs.Status)
	if err != nil {
		return err
	}
	write := func(mutate func(st *domain.RestoreStatus)) error {
		mutate(&st)
		res, err := eventstore.UpdateStatus(ctx, c.sw, ref, func(_ *domain.Object, cur *domain.RestoreStatus) (bool, error) {
			*cur = st
			return true, nil
		})
		if err != nil {
			return err
		}
		return c.cfg.Cache.WaitFor(ctx, res.Seq)
	}
	fail := func(reason string) error {
		log.Warn("restore failed", "stage", st.Stage, "reason", reason)
		done := c.cfg.Clock.Now().UTC()
		return write(func(st *domain.RestoreStatus) {
			st.Phase, st.Reason, st.CompletedAt, st.Wait = domain.RestoreFailed, truncate(reason), &done, nil
		})
	}
	b, ok, err := projections.Get[domain.EtcdBackup](c.cfg.Cache, domain.ObjectRef(domain.EtcdBackupKind, tenant, rs.Spec.Backup))
	if err != nil {
		return err
	}
	switch {
	case !ok:
		return fail(fmt.Sprintf("backup %q does not exist", rs.Spec.Backup))
	case b.Status.Phase != domain.BackupSucceeded:
		return fail(fmt.Sprintf("backup %q is %s, not Succeeded", rs.Spec.Backup, b.Status.Phase))
	}
	if st.Phase == domain.RestorePending {
		now := c.cfg.Clock.Now().UTC()
		if err := write(func(st *domain.RestoreStatus) {
			st.Phase, st.Stage, st.StartedAt, st.EtcdRevision = domain.RestoreRunning, domain.StageVerifying, &now, b.Status.EtcdRevision
		}); err != nil {
			return err
		}
	}
	cps, err := c.controlPlanes(tenant)
	if err != nil {
		return err
	}
	if len(cps) == 0 {
		return fail("the tenant has no control plane with an address")
	}
	first := cps[0]
	bundle, err := c.cfg.PKI.Bundle(ctx, tenant)
	if err != nil {
		return fmt.Errorf("loading the PKI of %s: %w", tenant, err)
	}
	for {
		log.Info("restore stage", "stage", st.Stage)
		switch st.Stage {
		case domain.StageVerifying:
			if err := c.verify(ctx, *b); err != nil {
				if errors.Is(err, ErrStore) {
					return err
				}
				return fail(fmt.Sprintf("backup %q cannot be restored: %v; nothing was changed on the nodes", b.Metadata.Name, err))
			}
			if err := write(func(st *domain.RestoreStatus) { st.Stage = domain.StageRecovering }); err != nil {
				return err
			}
		case domain.StageRecovering:
			resumed := st.Member != ""
			if !resumed {
				// The first time only: a later pass may find etcd running
				// because this restore's bootstrap went through.
				if _, err := c.cfg.Nodes.EtcdStatus(ctx, bundle, first.Spec.Address); err == nil {
					return fail(fmt.Sprintf("etcd runs on %s: a restore recovers a cluster whose control planes lost etcd; nothing was changed on the nodes", first.Metadata.Name))
				}
				if err := write(func(st *domain.RestoreStatus) { st.Member = first.Metadata.Name }); err != nil {
					return err
				}
			}
			if err := c.recover(ctx, bundle, first.Spec.Address, *b, resumed); err != nil {
				if errors.Is(err, ErrStore) || ctx.Err() != nil {
					return err
				}
				return fail(fmt.Sprintf("recovering etcd on %s: %v", first.Metadata.Name, err))
			}
			if err := write(func(st *domain.RestoreStatus) { st.Stage = domain.StageJoining }); err != nil {
				return err
			}
		case domain.StageJoining:
			n := 0
			err := c.await(ctx, &st, write, joinWait(cps), rs.Spec.Deadlines.Duration(domain.StageJoining, c.cfg.JoinTimeout), func() (err error) {
				n, err = c.joined(ctx, bundle, first.Spec.Address, len(cps))
				return err
			})
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, ErrStore) {
					return err
				}
				return fail(err.Error())
			}
			if err := write(func(st *domain.RestoreStatus) { st.Stage, st.Members, st.Wait = domain.StageChecking, n, nil }); err != nil {
				return err
			}
		case domain.StageChecking:
			var rev int64
			err := c.await(ctx, &st, write, checkWait(cps, b.Status.EtcdRevision), rs.Spec.Deadlines.Duration(domain.StageChecking, c.cfg.JoinTimeout), func() (err error) {
				rev, err = c.check(ctx, bundle, cps, b.Status.EtcdRevision)
				return err
			})
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, ErrStore) {
					return err
				}
				return fail(err.Error())
			}
			done := c.cfg.Clock.Now().UTC()
			return write(func(st *domain.RestoreStatus) {
				st.Phase, st.CompletedAt, st.Reason, st.Wait = domain.RestoreSucceeded, &done, "", nil
				if rev > 0 {
					st.EtcdRevision = rev
				}
			})
		default:
			return fail(fmt.Sprintf("unknown stage %q", st.Stage))
		}
	}
}

// verify reads the whole backup object: it must open (sealed stream intact),
// end in the snapshot's own checksum, and match the recorded size and sha256.
func (c *Controller) verify(ctx context.Context, b domain.EtcdBackup) error {
	return VerifyBackup(ctx, c.cfg.Backups, b)
}

// VerifyBackup reads the whole object of a Succeeded backup without keeping
// it: it must open (its sealed stream intact), end in the snapshot's own
// checksum, and match the backup's recorded size and sha256. A store that
// fails answers an error wrapping ErrStore; a damaged object any other.
func VerifyBackup(ctx context.Context, backups Opener, b domain.EtcdBackup) error {
	rc, err := backups.Open(ctx, objectOf(b))
	if errors.Is(err, eventstore.ErrBackupObjectNotFound) {
		return fmt.Errorf("its object is not in the bucket")
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStore, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, talos.NewSnapshotReader(rc))
	switch {
	case errors.Is(err, eventstore.ErrSealedStreamDamaged), errors.Is(err, talos.ErrSnapshotDamaged):
		return err
	case err != nil:
		return fmt.Errorf("%w: %w", ErrStore, err)
	case n != b.Status.Size:
		return fmt.Errorf("its object holds %d bytes, the backup recorded %d", n, b.Status.Size)
	case b.Status.SHA256 != "" && hex.EncodeToString(h.Sum(nil)) != b.Status.SHA256:
		return fmt.Errorf("its content's sha256 differs from the one recorded")
	}
	return nil
}

// Opener opens a backup's object (eventstore.EtcdBackups).
type Opener interface {
	Open(ctx context.Context, object string) (io.ReadCloser, error)
}

// recover uploads the snapshot to the control plane at address and
// bootstraps etcd there from it. AlreadyExists means etcd holds data: in a
// resumed pass, the bootstrap of an earlier pass went through (the first
// pass checked etcd was lost), so the run goes on and the check decides;
// in the first pass, the node's etcd was not lost (its status did not
// answer for a moment, or its data is coming back) and nothing was
// restored: an error, or the restore would report a success it did not
// make.
func (c *Controller) recover(ctx context.Context, bundle *secrets.Bundle, address string, b domain.EtcdBackup, resumed bool) error {
	rc, err := c.cfg.Backups.Open(ctx, objectOf(b))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStore, err)
	}
	defer rc.Close()
	err = c.cfg.Nodes.EtcdRecover(ctx, bundle, address, rc)
	if status.Code(errors.Unwrap(err)) == codes.AlreadyExists || status.Code(err) == codes.AlreadyExists {
		if resumed {
			return nil
		}
		return fmt.Errorf("its etcd holds data (it was not lost, or it is coming back): a restore recovers a cluster whose control planes lost etcd; nothing was restored (%w)", err)
	}
	return err
}

// joined answers how many etcd members serve (started and promoted: etcd
// lists a joining member from the moment it is added, as a learner that has
// not started yet), asking the control plane at address; an error says why
// fewer than want do.
func (c *Controller) joined(ctx context.Context, bundle *secrets.Bundle, address string, want int) (int, error) {
	members, err := c.cfg.Nodes.EtcdMembers(ctx, bundle, address)
	if err != nil {
		return 0, err
	}
	serving := 0
	for _, m := range members {
		if m.Serving() {
			serving++
		}
	}
	if serving < want {
		return serving, fmt.Errorf("%d of %d control planes serve etcd (%d listed)", serving, want, len(members))
	}
	return serving, nil
}

// joinWait is what the Joining stage waits for, in words that stay the
// same across restarts (the wait's deadline is kept by them).
func joinWait(cps []domain.Machine) string {
	if len(cps) == 1 {
		return cps[0].Metadata.Name + " to serve etcd after the restore"
	}
	return "control planes " + machineNames(cps[1:]) + " to join etcd after the restore"
}

// checkWait is what the Checking stage waits for: a member that was just
// promoted may not answer its status for a few seconds while its node
// finishes starting etcd's neighbours.
func checkWait(cps []domain.Machine, revision int64) string {
	what := "etcd on " + machineNames(cps) + " to be healthy"
	if revision > 0 {
		what += fmt.Sprintf(" at the snapshot's revision %d", revision)
	}
	return what
}

func machineNames(ms []domain.Machine) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Metadata.Name
	}
	return strings.Join(names, ", ")
}

// check makes sure etcd is back: every control plane's member healthy and,
// when the snapshot's revision is known, a snapshot taken now at that
// revision or above (what the snapshot's start says). It answers the revision found.
func (c *Controller) check(ctx context.Context, bundle *secrets.Bundle, cps []domain.Machine, want int64) (int64, error) {
	var problems []string
	for _, m := range cps {
		st, err := c.cfg.Nodes.EtcdStatus(ctx, bundle, m.Spec.Address)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", m.Metadata.Name, err))
		case len(st.Errors) > 0:
			problems = append(problems, fmt.Sprintf("%s: %s", m.Metadata.Name, strings.Join(st.Errors, "; ")))
		}
	}
	if len(problems) > 0 {
		return 0, fmt.Errorf("etcd is not healthy after the recovery: %s", strings.Join(problems, "; "))
	}
	if want <= 0 {
		return 0, nil
	}
	rev, ok, err := c.revisionNow(ctx, bundle, cps[0].Spec.Address)
	switch {
	case err != nil:
		return 0, fmt.Errorf("reading etcd's revision after the recovery: %v", err)
	case !ok:
		return 0, nil
	case rev < want:
		// Not below: a live control plane writes (leases, heartbeats) as
		// soon as etcd is back, so the revision moves on from the snapshot's.
		return rev, fmt.Errorf("etcd is at revision %d after the recovery, below the snapshot's %d", rev, want)
	}
	return rev, nil
}

// revisionNow reads etcd's revision from a snapshot taken now (the whole
// snapshot: the revision is in its bolt database, see revision.go). ok is
// false when the snapshot is not one whose revision can be read.
func (c *Controller) revisionNow(ctx context.Context, bundle *secrets.Bundle, address string) (int64, bool, error) {
	rc, err := c.cfg.Nodes.EtcdSnapshot(ctx, bundle, address)
	if err != nil {
		return 0, false, err
	}
	defer rc.Close()
	rev, err := snapshotRevision(rc, c.cfg.TempDir)
	switch {
	case errors.Is(err, etcdsnapshot.ErrInvalid):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return rev, true, nil
}

// storedStatus is the restore's status as the stream holds it: the read
// model may not have the last write of a holder that stopped just before
// (a wait whose deadline must not start afresh, issue 43), and every write
// of the run replaces the whole status.
func (c *Controller) storedStatus(ctx context.Context, ref domain.Ref, cached domain.RestoreStatus) (domain.RestoreStatus, error) {
	rec, err := c.cfg.Store.Load(ctx, ref)
	if err != nil {
		return cached, fmt.Errorf("loading %s: %w", ref, err)
	}
	if rec == nil || rec.State() == nil {
		return cached, nil
	}
	var st domain.RestoreStatus
	if err := json.Unmarshal(rec.State().Status, &st); err != nil {
		return cached, fmt.Errorf("decoding the status of %s: %w", ref, err)
	}
	return st, nil
}
