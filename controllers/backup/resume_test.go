package backup_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/talos"
)

// setStatus writes an object's status as a run cut short would have left it.
func (e *env) setStatus(kind *domain.KindInfo, name string, status any) {
	e.T.Helper()
	raw, err := json.Marshal(status)
	require.NoError(e.T, err)
	e.Execute(domain.Command{Op: domain.OpUpdateStatus, Ref: e.ref(kind, name), Object: &domain.Object{Status: raw}})
}

// TestResumeAfterACrash: what a process killed mid-way leaves — a backup
// Running with the chunks of its unfinished object in the bucket, a
// restore Running at Joining after its bootstrap went through — is picked up
// by the next leader: the partial chunks are purged, the backup is taken
// again (Succeeded, its object whole), and the restore goes on from its
// stage without uploading again.
func TestResumeAfterACrash(t *testing.T) {
	e := newEnv(t, 1, `{}`)
	want := e.putKey("k", "v")

	// A backup cut short: Running, with orphan chunks in the bucket.
	e.createBackup("b1")
	started := time.Now().UTC()
	e.setStatus(domain.EtcdBackupKind, "b1", domain.EtcdBackupStatus{Phase: domain.BackupRunning, StartedAt: &started})
	_, err := e.Store.JetStream().Publish(e.Ctx, "$O."+eventstore.EtcdBackupBucket+".C.killed-mid-way", []byte("partial"))
	require.NoError(t, err)

	_, stop := e.start("r1", controller.RealClock(nil))
	b := e.backupDone("b1")
	require.Equal(t, domain.BackupSucceeded, b.Status.Phase, b.Status.Reason)
	require.Equal(t, want.Revision, b.Status.EtcdRevision)
	stream, err := e.Store.JetStream().Stream(e.Ctx, "OBJ_"+eventstore.EtcdBackupBucket)
	require.NoError(t, err)
	info, err := stream.Info(e.Ctx, jetstreamSubjects("$O."+eventstore.EtcdBackupBucket+".C.>"))
	require.NoError(t, err)
	require.Len(t, info.State.Subjects, 1, "the partial chunks are gone, the backup's remain: %v", info.State.Subjects)

	// A restore cut short after its bootstrap went through (recorded at
	// Recovering, member chosen): the next leader uploads and bootstraps
	// again, reads Talos's AlreadyExists as that bootstrap, and goes on.
	e.wipe()
	e.createRestore("r1", "b1")
	r := e.restoreDone("r1")
	require.Equal(t, domain.RestoreSucceeded, r.Status.Phase, r.Status.Reason)
	stop()
	e.createRestore("r2", "b1")
	e.setStatus(domain.RestoreKind, "r2", domain.RestoreStatus{Phase: domain.RestoreRunning, Stage: domain.StageRecovering,
		Member: "cp-1", StartedAt: &started, EtcdRevision: want.Revision})
	e.start("r2", controller.RealClock(nil))
	r = e.restoreDone("r2")
	require.Equal(t, domain.RestoreSucceeded, r.Status.Phase, r.Status.Reason)
	require.Equal(t, domain.StageChecking, r.Status.Stage)
	require.Equal(t, want.Revision, e.etcdData().Revision)

	// A fresh restore into a cluster whose etcd runs is refused.
	e.createRestore("r3", "b1")
	r = e.restoreDone("r3")
	require.Equal(t, domain.RestoreFailed, r.Status.Phase)
	require.Contains(t, r.Status.Reason, "etcd runs on cp-1")
}

// statusAway is the Talos API with etcd's status not answering, as a node
// whose etcd is restarting (or whose status call timed out) looks.
type statusAway struct{ talos.NodeAPI }

func (statusAway) EtcdStatus(context.Context, *secrets.Bundle, string) (talos.EtcdMemberStatus, error) {
	return talos.EtcdMemberStatus{}, status.Error(codes.Unavailable, "etcd is restarting")
}

// TestRestoreRefusesDataItDidNotRestore: a restore whose first look finds
// etcd's status away, but whose bootstrap finds etcd's data there (Talos's
// AlreadyExists), restored nothing: it fails, and the data is as it was,
// rather than reporting a success it did not make.
func TestRestoreRefusesDataItDidNotRestore(t *testing.T) {
	e := newEnv(t, 1, `{}`)
	e.putKey("k", "v1")
	e.createBackup("b1")
	_, stop := e.start("b", controller.RealClock(nil))
	require.Equal(t, domain.BackupSucceeded, e.backupDone("b1").Status.Phase)
	stop()
	after := e.putKey("k", "v2")

	e.startWith("r", controller.RealClock(nil), statusAway{talos.NodeAPI{Timeout: 5 * time.Second}})
	e.createRestore("r1", "b1")
	r := e.restoreDone("r1")
	require.Equal(t, domain.RestoreFailed, r.Status.Phase)
	require.Contains(t, r.Status.Reason, "its etcd holds data")
	require.Contains(t, r.Status.Reason, "nothing was restored")
	require.Equal(t, after.Revision, e.etcdData().Revision, "etcd is as it was")
}

func jetstreamSubjects(filter string) jetstream.StreamInfoOpt {
	return jetstream.WithSubjectFilter(filter)
}
