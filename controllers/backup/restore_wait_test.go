package backup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// fewJoin is the Talos API with only serving of the control planes listed
// as etcd members, as a cluster whose other members never join looks.
type fewJoin struct {
	talos.NodeAPI
	serving int
}

func (f fewJoin) EtcdMembers(context.Context, *secrets.Bundle, string) ([]talos.EtcdMember, error) {
	out := make([]talos.EtcdMember, f.serving)
	for i := range out {
		out[i] = talos.EtcdMember{ID: uint64(i + 1), Hostname: fmt.Sprintf("cp-%d", i+1), ClientURLs: []string{"https://192.0.2.1:2379"}}
	}
	return out, nil
}

// TestRestoreJoinDeadlineSurvivesARestart: a restore whose other control
// planes never join etcd records what it waits for, since when and until
// when (its spec's join deadline); a controller started after the first
// one stopped mid-wait keeps that deadline (a fresh one would be later)
// and records the changed answer; at the deadline the restore fails naming
// the stage, what it waited for and the last answer, and the wait is gone.
func TestRestoreJoinDeadlineSurvivesARestart(t *testing.T) {
	e := newEnv(t, 3, `{}`)
	e.putKey("k", "v")
	e.createBackup("b1")
	_, stop := e.start("b", controller.RealClock(nil))
	require.Equal(t, domain.BackupSucceeded, e.backupDone("b1").Status.Phase)
	stop()
	e.wipe()

	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	clock := controllertest.NewClock(t0)
	api := talos.NodeAPI{Timeout: 5 * time.Second}
	_, stopFirst := e.startWith("r1", clock, fewJoin{api, 1})
	e.Execute(domain.Command{Op: domain.OpCreate, Ref: e.ref(domain.RestoreKind, "r1"), Object: &domain.Object{
		Metadata: domain.ObjectMeta{Name: "r1", Tenant: e.Tenant}, Spec: json.RawMessage(`{"backup":"b1","deadlines":{"join":"5m"}}`)}})
	const waitsFor = "control planes cp-2, cp-3 to join etcd after the restore"
	w := e.restoreWait("r1", "1 of 3 control planes serve etcd (1 listed)")
	require.Equal(t, waitsFor, w.For)
	require.Equal(t, t0, w.Since)
	require.Equal(t, t0.Add(5*time.Minute), w.Deadline, "the spec's join deadline")
	require.Equal(t, "waiting for "+waitsFor+": 1 of 3 control planes serve etcd (1 listed), 1m (fails in 4m)", w.Message(t0.Add(time.Minute)))

	// Stopped mid-wait (as kill -9 would leave it: Running at Joining with
	// its wait); three minutes later another replica takes over.
	stopFirst()
	clock.Advance(3 * time.Minute)
	e.startWith("r2", clock, fewJoin{api, 2})
	w = e.restoreWait("r1", "2 of 3 control planes serve etcd (2 listed)")
	require.Equal(t, t0, w.Since, "the resumed wait began when the first did")
	require.Equal(t, t0.Add(5*time.Minute), w.Deadline, "the resumed wait keeps its deadline")

	clock.Advance(2 * time.Minute)
	r := e.restoreDone("r1")
	require.Equal(t, domain.RestoreFailed, r.Status.Phase)
	require.Equal(t, domain.StageJoining, r.Status.Stage)
	require.Equal(t, "stage Joining passed its deadline of 5m waiting for "+waitsFor+"; last answer: 2 of 3 control planes serve etcd (2 listed)", r.Status.Reason)
	require.Nil(t, r.Status.Wait, "the wait ended with the run")
}

// restoreWait waits until the restore's recorded wait has lastError.
func (e *env) restoreWait(name, lastError string) domain.StepWait {
	e.T.Helper()
	var w *domain.StepWait
	require.Eventually(e.T, func() bool {
		r, ok, err := projections.Get[domain.Restore](e.Cache, e.ref(domain.RestoreKind, name))
		if err != nil || !ok || r.Status.Wait == nil {
			return false
		}
		w = r.Status.Wait
		return w.LastError == lastError
	}, 60*time.Second, 10*time.Millisecond, "restore %s waiting with %q (recorded: %+v)", name, lastError, w)
	return *w
}
