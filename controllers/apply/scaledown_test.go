package apply

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// scaleDownEnv is an emulated tenant (cp-1..cp-n bootstrapped on cp-1, w-1..)
// and a worker that drives it through the real Talos API.
type scaleDownEnv struct {
	t *testing.T
	c *talostest.Cluster
	w *Worker
}

func newScaleDownEnv(t *testing.T, cps, workers int) *scaleDownEnv {
	c := talostest.Start(t, cps, workers)
	logs, err := tofu.OpenLogs(c.Ctx, c.Store)
	require.NoError(t, err)
	w := NewWorker(Config{Store: c.Store, Cache: c.Cache, Bundles: c.PKI, Logs: logs, Holder: "test",
		Nodes: talos.NodeAPI{Timeout: 3 * time.Second}})
	w.updateTenantStatus(c.Ctx, c.Tenant, func(s *domain.TenantStatus, _ int64) {
		setCondition(s, domain.Condition{Type: BootstrappedCondition, Status: "True", Reason: "EtcdBootstrapped"}, time.Now())
	})
	require.Eventually(t, func() bool { return w.bootstrapped(c.Tenant) }, 10*time.Second, 10*time.Millisecond)
	return &scaleDownEnv{t: t, c: c, w: w}
}

func (e *scaleDownEnv) machines(names ...string) []domain.Machine {
	var out []domain.Machine
	for _, n := range names {
		out = append(out, *talostest.GetAs[domain.Machine](e.t, e.c.Cache, domain.ObjectRef(domain.MachineKind, e.c.Tenant, n)))
	}
	return out
}

// members lists etcd's members through the emulator's Talos API on a node.
func (e *scaleDownEnv) members(through string) []string {
	e.t.Helper()
	b, err := e.c.PKI.Bundle(e.c.Ctx, e.c.Tenant)
	require.NoError(e.t, err)
	m := e.machines(through)[0]
	ms, err := talos.NodeAPI{}.EtcdMembers(e.c.Ctx, b, m.Spec.Address)
	require.NoError(e.t, err)
	var out []string
	for _, x := range ms {
		out = append(out, x.Hostname)
	}
	return out
}

// run runs the scale-down of going and returns its log.
func (e *scaleDownEnv) run(going ...string) (string, error) {
	b, err := e.c.PKI.Bundle(e.c.Ctx, e.c.Tenant)
	require.NoError(e.t, err)
	logw := e.w.cfg.Logs.Writer(e.c.Ctx, e.c.Tenant, "a-1")
	err = e.w.scaleDown(e.c.Ctx, e.c.Tenant, b, e.machines(going...), logw)
	out := string(logw.Bytes())
	require.NoError(e.t, logw.Close())
	return out, err
}

// requireOrder checks that the lines appear in the log in this order.
func requireOrder(t *testing.T, log string, lines ...string) {
	t.Helper()
	at := 0
	for _, l := range lines {
		i := strings.Index(log[at:], l)
		require.GreaterOrEqual(t, i, 0, "%q after position %d in:\n%s", l, at, log)
		at += i + len(l)
	}
}

// TestScaleDownLeavesEtcdOneAtATime: 3 control planes to 1 and a worker
// less: the two control planes leave etcd, highest index first, each step
// checked; the worker is reset; the emulator's membership follows.
func TestScaleDownLeavesEtcdOneAtATime(t *testing.T) {
	e := newScaleDownEnv(t, 3, 1)
	require.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, e.members("cp-1"))
	log, err := e.run("cp-2", "cp-3", "w-1")
	require.NoError(t, err, log)
	requireOrder(t, log,
		"scale-down: etcd has 3 members; 2 leave, one at a time: cp-3, cp-2",
		"cp-3 (", ") left etcd (EtcdLeaveCluster)",
		"step 1/2: cp-3 left etcd; 2 members remain, 2 healthy (quorum 2)",
		"cp-2 (", ") left etcd (EtcdLeaveCluster)",
		"step 2/2: cp-2 left etcd; 1 members remain, 1 healthy (quorum 1)",
		"resetting worker w-1", "worker w-1 reset")
	require.Equal(t, []string{"cp-1"}, e.members("cp-1"))
	for _, n := range []string{"cp-2", "cp-3"} {
		st, err := e.c.Em.Get(n)
		require.NoError(t, err)
		require.True(t, st.EtcdLeft, n)
	}
	require.Eventually(t, func() bool {
		st, err := e.c.Em.Get("w-1")
		return err == nil && st.Phase == emulator.PhaseMaintenance
	}, 10*time.Second, 10*time.Millisecond, "the worker was reset into maintenance mode")

	// Run again (a retried run): the members are gone already, nothing to do.
	log, err = e.run("cp-2", "cp-3")
	require.NoError(t, err, log)
	require.Contains(t, log, "etcd has 1 members; 0 leave")
}

// TestScaleDownRemovesAnUnreachableMemberByID: an unreachable control plane
// that goes is removed through a healthy member, first.
func TestScaleDownRemovesAnUnreachableMemberByID(t *testing.T) {
	e := newScaleDownEnv(t, 3, 0)
	e.c.Fault("cp-2", emulator.Faults{Unreachable: true})
	log, err := e.run("cp-2", "cp-3")
	require.NoError(t, err, log)
	requireOrder(t, log,
		"one at a time: cp-2, cp-3",
		"cp-2 removed from etcd by id", "through cp-1 (EtcdRemoveMemberByID)",
		"step 1/2: cp-2 left etcd; 2 members remain, 2 healthy",
		"cp-3 (", ") left etcd (EtcdLeaveCluster)")
	require.Equal(t, []string{"cp-1"}, e.members("cp-1"))
}

// TestScaleDownRefusedWithoutQuorum: keeping an unreachable control plane
// while two go would leave one healthy of two members: refused before any
// member leaves.
func TestScaleDownRefusedWithoutQuorum(t *testing.T) {
	e := newScaleDownEnv(t, 3, 1)
	e.c.Fault("cp-1", emulator.Faults{Unreachable: true})
	log, err := e.run("cp-2", "cp-3")
	require.Error(t, err, log)
	require.True(t, errors.Is(err, errScaleDownRefused), "%v", err)
	require.ErrorContains(t, err, "removing cp-3 would leave 1 healthy of 2 etcd members; quorum needs 2; nothing was destroyed")
	require.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, e.members("cp-2"), "no member left")

	// Every control plane going while a worker stays is refused too.
	_, err = e.run("cp-1", "cp-2", "cp-3")
	require.ErrorIs(t, err, errScaleDownRefused)
	require.ErrorContains(t, err, "it would remove every control plane (cp-1, cp-2, cp-3) while other machines stay")
}

// label marks the machines as managed by managedBy.
func (e *scaleDownEnv) label(managedBy string, names ...string) {
	for _, n := range names {
		ref := domain.ObjectRef(domain.MachineKind, e.c.Tenant, n)
		obj, ok := e.c.Cache.GetObject(ref)
		require.True(e.t, ok)
		next := obj.DeepCopy()
		next.Metadata.Labels = map[string]string{ManagedByLabel: managedBy}
		e.c.Execute(domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next})
	}
}

// TestScaleDownMetalControlPlanesLeaveBeforeReset: metal control planes that
// left their group leave etcd before the metal path resets them; workers are
// left to that reset.
func TestScaleDownMetalControlPlanesLeaveBeforeReset(t *testing.T) {
	e := newScaleDownEnv(t, 3, 1)
	e.label(managedByMetal, "cp-1", "cp-2", "cp-3", "w-1")
	b, err := e.c.PKI.Bundle(e.c.Ctx, e.c.Tenant)
	require.NoError(t, err)
	logw := e.w.cfg.Logs.Writer(context.Background(), e.c.Tenant, "a-3")
	gone, err := e.w.leaveEtcdMetal(e.c.Ctx, e.c.Tenant, b, map[string]bool{"cp-1": true}, logw)
	require.NoError(t, err)
	require.Len(t, gone, 3, "the Nodes of every machine that left go after the reset")
	log := string(logw.Bytes())
	require.NoError(t, logw.Close())
	require.Contains(t, log, "one at a time: cp-3, cp-2")
	require.NotContains(t, log, "w-1", "the metal path resets workers itself")
	require.Equal(t, []string{"cp-1"}, e.members("cp-1"))
	st, err := e.c.Em.Get("w-1")
	require.NoError(t, err)
	require.Equal(t, emulator.PhaseRunning, st.Phase)
}

// TestScaleDownTofuGoing: what tofu destroys is what the generated
// configuration no longer has, among the machines tofu built.
func TestScaleDownTofuGoing(t *testing.T) {
	e := newScaleDownEnv(t, 3, 0)
	e.label(managedByValue, "cp-1", "cp-2", "cp-3")
	in := providers.GenerateInput{Groups: []providers.GroupInput{{Machines: []providers.MachineInput{{Name: "cp-1"}}}}}
	logw := e.w.cfg.Logs.Writer(context.Background(), e.c.Tenant, "a-2")
	gone, err := e.w.scaleDownTofu(e.c.Ctx, e.c.Tenant, in, logw)
	require.NoError(t, err)
	require.NoError(t, logw.Close())
	var names []string
	for _, m := range gone {
		names = append(names, m.Metadata.Name)
	}
	require.ElementsMatch(t, []string{"cp-2", "cp-3"}, names, "their Nodes go after tofu")
	require.Equal(t, []string{"cp-1"}, e.members("cp-1"))
	ms, err := projections.List[domain.Machine](e.c.Cache, domain.MachineKind, projections.ListOptions{Tenant: e.c.Tenant})
	require.NoError(t, err)
	require.Len(t, ms, 3, "machines are forgotten by the state projection, after tofu")
}
