package backup_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
)

// TestBackupWipeRestore: keys written into the tenant's etcd are backed up
// (from a control plane that is not the leader, with the snapshot's
// revision recorded), etcd is wiped on every control plane, and a restore
// brings back exactly the keys and revision of the backup; the object in
// the bucket is sealed and the plain snapshot opens from it.
func TestBackupWipeRestore(t *testing.T) {
	e := newEnv(t, 3, `{}`)
	e.start("r1", controller.RealClock(nil))
	e.putKey("app/config", "v1")
	want := e.putKey("app/secret", "s3cret")

	e.createBackup("b1")
	b := e.backupDone("b1")
	require.Equal(t, domain.BackupSucceeded, b.Status.Phase, b.Status.Reason)
	require.Equal(t, want.Revision, b.Status.EtcdRevision)
	require.Equal(t, want.SnapshotSize, b.Status.Size)
	require.Len(t, b.Status.SHA256, 64)
	require.NotEqual(t, "cp-1", b.Status.Member, "not the leader (cp-1 bootstrapped etcd)")
	require.Greater(t, b.Status.StoredSize, b.Status.Size)

	raw, err := e.Store.JetStream().ObjectStore(e.Ctx, eventstore.EtcdBackupBucket)
	require.NoError(t, err)
	sealed, err := raw.GetBytes(e.Ctx, eventstore.EtcdBackupObject(e.Tenant, "b1", b.Metadata.UID))
	require.NoError(t, err)
	require.NotContains(t, string(sealed), "s3cret", "the plain snapshot is never at rest")

	e.putKey("app/later", "after the backup")
	e.wipe()
	require.False(t, e.etcdData().Bootstrapped)

	e.createRestore("r1", "b1")
	r := e.restoreDone("r1")
	require.Equal(t, domain.RestoreSucceeded, r.Status.Phase, r.Status.Reason)
	require.Equal(t, domain.StageChecking, r.Status.Stage)
	require.Equal(t, "cp-1", r.Status.Member)
	require.Equal(t, want.Revision, r.Status.EtcdRevision)
	require.Equal(t, 3, r.Status.Members)
	got := e.etcdData()
	require.True(t, got.Bootstrapped)
	require.Equal(t, want.Revision, got.Revision)
	require.Equal(t, map[string]string{"app/config": "v1", "app/secret": "s3cret"}, got.Keys)
}

// TestRestoreRefusesTamperedObject: a backup whose object was altered in
// the bucket fails its restore at Verifying with a reason saying so, and
// nothing on the nodes changed (etcd stays wiped, no snapshot uploaded: a
// recovering bootstrap still has nothing to recover from).
func TestRestoreRefusesTamperedObject(t *testing.T) {
	e := newEnv(t, 1, `{}`)
	e.start("r1", controller.RealClock(nil))
	e.putKey("k", "v")
	e.createBackup("b1")
	b := e.backupDone("b1")
	require.Equal(t, domain.BackupSucceeded, b.Status.Phase, b.Status.Reason)

	raw, err := e.Store.JetStream().ObjectStore(e.Ctx, eventstore.EtcdBackupBucket)
	require.NoError(t, err)
	obj := eventstore.EtcdBackupObject(e.Tenant, "b1", b.Metadata.UID)
	sealed, err := raw.GetBytes(e.Ctx, obj)
	require.NoError(t, err)
	sealed[len(sealed)-20] ^= 0x01
	_, err = raw.PutBytes(e.Ctx, obj, sealed)
	require.NoError(t, err)

	e.wipe()
	e.createRestore("r1", "b1")
	r := e.restoreDone("r1")
	require.Equal(t, domain.RestoreFailed, r.Status.Phase)
	require.Equal(t, domain.StageVerifying, r.Status.Stage)
	require.Contains(t, r.Status.Reason, "fails authentication")
	require.Contains(t, r.Status.Reason, "nothing was changed on the nodes")
	require.Empty(t, r.Status.Member)
	require.False(t, e.etcdData().Bootstrapped, "etcd still wiped")
	for _, n := range e.Em.List() {
		require.False(t, n.Bootstrapped, "%s", n.Name)
	}
}

// TestRestoreRefusesRunningEtcd: a restore into a cluster whose etcd runs
// fails before anything is uploaded.
func TestRestoreRefusesRunningEtcd(t *testing.T) {
	e := newEnv(t, 1, `{}`)
	e.start("r1", controller.RealClock(nil))
	e.createBackup("b1")
	require.Equal(t, domain.BackupSucceeded, e.backupDone("b1").Status.Phase)
	before := e.putKey("k", "v")
	e.createRestore("r1", "b1")
	r := e.restoreDone("r1")
	require.Equal(t, domain.RestoreFailed, r.Status.Phase)
	require.Contains(t, r.Status.Reason, "etcd runs on cp-1")
	require.Equal(t, before.Revision, e.etcdData().Revision)
}

// TestBackupObjectGoesWithTheBackup: deleting a backup deletes its object,
// then the backup.
func TestBackupObjectGoesWithTheBackup(t *testing.T) {
	e := newEnv(t, 1, `{}`)
	e.start("r1", controller.RealClock(nil))
	e.createBackup("b1")
	b := e.backupDone("b1")
	e.Execute(domain.Command{Op: domain.OpDelete, Ref: e.ref(domain.EtcdBackupKind, "b1")})
	require.Eventually(t, func() bool {
		_, ok := e.Cache.Get(e.ref(domain.EtcdBackupKind, "b1"))
		return !ok
	}, 30*time.Second, 10*time.Millisecond, "backup and object gone")
	_, err := e.backups.Open(context.Background(), eventstore.EtcdBackupObject(e.Tenant, "b1", b.Metadata.UID))
	require.ErrorIs(t, err, eventstore.ErrBackupObjectNotFound)
}
