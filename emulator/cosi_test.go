package emulator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
)

// TestCOSIResourcesFollowTheNode reads and watches a node's COSI resources
// through machinery's client as the node boots, joins etcd, is upgraded and
// its worker is reset.
func TestCOSIResourcesFollowTheNode(t *testing.T) {
	em, _ := startEmulator(t, fastConfig(t.TempDir()))
	tc := newTestCluster(t, "cosi")
	ctx := context.Background()
	cp, err := em.Create(ctx, NodeSpec{Name: "cosi-cp", UserData: tc.controlPlane})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "cosi-cp", PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, "running")
	c := connect(t, tc.admin, cp.Address)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, func() error {
			ms, err := safe.StateGetByID[*runtime.MachineStatus](callCtx(t), c.COSI, runtime.MachineStatusID)
			if err != nil {
				return err
			}
			if ms.TypedSpec().Stage != runtime.MachineStageRunning || !ms.TypedSpec().Status.Ready {
				return fmt.Errorf("machine status %v", ms.TypedSpec())
			}
			return nil
		}())
	}, 15*time.Second, 10*time.Millisecond, "machine status running")

	watch := make(chan safe.WrappedStateEvent[*cluster.Member])
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	require.NoError(t, safe.StateWatchKind(wctx, c.COSI, cluster.NewMember(cluster.NamespaceName, "").Metadata(), watch, state.WithBootstrapContents(true)))
	seen := func(name string, typ state.EventType) {
		t.Helper()
		for {
			select {
			case ev := <-watch:
				r, err := ev.Resource()
				if err == nil && r.Metadata().ID() == name && ev.Type() == typ {
					return
				}
			case <-callCtx(t).Done():
				t.Fatalf("no %v event for member %s", typ, name)
			}
		}
	}
	seen("cosi-cp", state.Created)

	_, err = em.Create(ctx, NodeSpec{Name: "cosi-worker", UserData: tc.worker})
	require.NoError(t, err)
	seen("cosi-worker", state.Created)

	mc, err := safe.StateGetByID[*config.MachineConfig](callCtx(t), c.COSI, config.ActiveID)
	require.NoError(t, err)
	require.Equal(t, "cosi", mc.Config().Cluster().Name())

	reader := connect(t, tc.reader, cp.Address)
	_, err = safe.StateGetByID[*config.MachineConfig](callCtx(t), reader.COSI, config.ActiveID)
	requireCode(t, codes.PermissionDenied, err)
	_, err = safe.StateGetByID[*runtime.MachineStatus](callCtx(t), reader.COSI, runtime.MachineStatusID)
	require.NoError(t, err, "a reader reads what is not sensitive")

	w := connect(t, tc.admin, mustGet(t, em, "cosi-worker").Address)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "cosi-worker", PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, "worker running")
	_, err = w.ResetGenericWithResponse(callCtx(t), &machineapi.ResetRequest{Graceful: true, Reboot: true})
	require.NoError(t, err)
	seen("cosi-worker", state.Destroyed)
}

func mustGet(t *testing.T, em *Emulator, name string) NodeStatus {
	st, err := em.Get(name)
	require.NoError(t, err)
	return st
}
