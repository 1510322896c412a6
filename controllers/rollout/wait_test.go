package rollout_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/rollout"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// clockProber answers every tenant Ready, probed at the test clock's now.
type clockProber struct{ clock *controllertest.Clock }

func (p clockProber) Probe(_ context.Context, tenant string, _ bool) (domain.TenantHealth, error) {
	return domain.TenantHealth{Tenant: tenant, State: domain.HealthReady, ObservedAt: p.clock.Now().Add(time.Second)}, nil
}

// noConfigs is the config progress of a rollout that changes no config.
type noConfigs struct{}

func (noConfigs) ConfigProgress(context.Context, string, time.Time) (talos.ConfigProgress, error) {
	return talos.ConfigProgress{}, nil
}

// waitEnv is a store and read model with one tenant, and no upgrade saga:
// the test writes the Upgrades' statuses as the saga would.
type waitEnv struct {
	t     *testing.T
	ctx   context.Context
	store *eventstore.Store
	cache *projections.Cache
	clock *controllertest.Clock
}

func newWaitEnv(t *testing.T, start time.Time) *waitEnv {
	ctx, cancel := context.WithCancel(context.Background())
	es := eventstoretest.Start(t)
	cache := projections.NewCache(es.Store, nil)
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e := &waitEnv{t: t, ctx: ctx, store: es.Store, cache: cache, clock: controllertest.NewClock(start)}
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef("acme"),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "acme"}, Spec: json.RawMessage(`{}`)}})
	return e
}

func (e *waitEnv) execute(cmd domain.Command) {
	e.t.Helper()
	cmd.Actor, cmd.Now, cmd.NewUID = "test", time.Now(), uuid.NewString()
	res, err := e.store.Execute(e.ctx, cmd, eventstore.UpdateOptions{Retries: 5})
	require.NoError(e.t, err)
	require.NoError(e.t, e.cache.WaitFor(e.ctx, res.Seq))
}

// start runs a rollout controller until stop (or the test's end).
func (e *waitEnv) start() (stop func()) {
	e.t.Helper()
	return e.startWith(clockProber{e.clock})
}

// startWith is start with the given prober.
func (e *waitEnv) startWith(p rollout.Prober) (stop func()) {
	e.t.Helper()
	cfg := rollout.Config{Store: e.store, Cache: e.cache, Prober: p, Configs: noConfigs{}, Holder: "r1",
		Clock: e.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	require.NoError(e.t, cfg.Validate())
	c := rollout.New(cfg)
	stop = controllertest.Start(e.t, e.ctx, c.Run)
	require.Eventually(e.t, c.Leading, 30*time.Second, 5*time.Millisecond)
	return stop
}

func (e *waitEnv) createRollout(name string, spec domain.RolloutSpec) {
	e.t.Helper()
	raw, err := json.Marshal(spec)
	require.NoError(e.t, err)
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.RolloutKind, "", name),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name}, Spec: raw}})
}

func (e *waitEnv) rolloutUntil(name string, until func(*assert.CollectT, *domain.Rollout)) *domain.Rollout {
	e.t.Helper()
	var ro *domain.Rollout
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		got, ok, err := projections.Get[domain.Rollout](e.cache, domain.ObjectRef(domain.RolloutKind, "", name))
		require.NoError(ct, err)
		require.True(ct, ok)
		ro = got
		until(ct, ro)
	}, 30*time.Second, 10*time.Millisecond)
	return ro
}

// upgradeWritten waits until the rollout controller wrote the tenant's Upgrade.
func (e *waitEnv) upgradeWritten(name string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		_, ok := e.cache.Get(domain.ObjectRef(domain.UpgradeKind, "acme", name))
		return ok
	}, 30*time.Second, 10*time.Millisecond, "upgrade %s written", name)
}

// upgradeStatus writes the tenant's Upgrade status as the saga would.
func (e *waitEnv) upgradeStatus(name string, st domain.UpgradeStatus) {
	e.t.Helper()
	raw, err := json.Marshal(st)
	require.NoError(e.t, err)
	e.execute(domain.Command{Op: domain.OpUpdateStatus, Ref: domain.ObjectRef(domain.UpgradeKind, "acme", name), Object: &domain.Object{Status: raw}})
}

// verifying is an Upgrade whose control plane waits, as the saga records it.
func verifying(answer string, since time.Time) domain.UpgradeStatus {
	return domain.UpgradeStatus{Phase: domain.UpgradeRunning, Current: "cp-1", Machines: []domain.UpgradeMachine{{
		Name: "cp-1", Role: domain.RoleControlPlane, To: "v1.13.1", Phase: domain.StepVerifying,
		Wait: &domain.StepWait{For: "cp-1 to run Talos v1.13.1", Since: since, Deadline: since.Add(time.Hour), LastError: answer},
	}}}
}

// TestWaveProgressDeadline: a wave whose tenant's upgrade does not finish
// records what it waits for (with the upgrade's own wait as the answer) and
// its deadline (spec.progressDeadline from the start); a controller
// restarted mid-wait keeps that deadline although the spec's was raised
// meanwhile; at the deadline the rollout halts naming what the wave waited
// for and the last answer.
func TestWaveProgressDeadline(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	e := newWaitEnv(t, t0)
	spec := domain.RolloutSpec{Change: domain.RolloutChange{TalosVersion: "v1.13.1"}, Waves: []domain.RolloutWave{{Percent: 100}},
		Soak: "0s", ProgressDeadline: "10m"}
	e.createRollout("t113", spec)
	stop := e.start()

	const what = "tenants of wave 1 to finish Talos v1.13.1 (0 of 1 done)"
	ro := e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		require.Len(ct, ro.Status.Waves, 1)
		require.NotNil(ct, ro.Status.Waves[0].Wait)
	})
	w := ro.Status.Waves[0].Wait
	require.Equal(t, what, w.For)
	require.True(t, w.Since.Equal(t0), "since %s", w.Since)
	require.True(t, w.Deadline.Equal(t0.Add(10*time.Minute)), "deadline %s", w.Deadline)

	// The saga's own wait is the wave's answer (recorded WaitRecordEvery later).
	e.upgradeWritten("t113")
	e.upgradeStatus("t113", verifying("connection refused", t0))
	e.clock.Advance(time.Minute)
	ro = e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		assert.Equal(ct, "acme: upgrade t113 running; cp-1: waiting for cp-1 to run Talos v1.13.1: connection refused", ro.Status.Waves[0].Wait.LastError)
	})
	require.Equal(t, "waiting for "+what+": acme: upgrade t113 running; cp-1: waiting for cp-1 to run Talos v1.13.1: connection refused, 1m (fails in 9m)",
		ro.Status.Waves[0].WaitMessage(e.clock.Now()))

	// Restarted mid-wait with the spec's deadline raised: the recorded one holds.
	stop()
	e.clock.Advance(5 * time.Minute)
	spec.ProgressDeadline = "1h"
	raw, err := json.Marshal(spec)
	require.NoError(t, err)
	e.execute(domain.Command{Op: domain.OpUpdate, Ref: domain.ObjectRef(domain.RolloutKind, "", "t113"),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "t113"}, Spec: raw}})
	e.upgradeStatus("t113", verifying("connection reset by peer", t0))
	e.start()
	ro = e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		assert.Contains(ct, ro.Status.Waves[0].Wait.LastError, "connection reset by peer")
	})
	require.True(t, ro.Status.Waves[0].Wait.Deadline.Equal(t0.Add(10*time.Minute)), "deadline after the restart %s", ro.Status.Waves[0].Wait.Deadline)

	// At the deadline: halted, naming what the wave waited for and the last answer.
	e.clock.Advance(t0.Add(10 * time.Minute).Sub(e.clock.Now()))
	ro = e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		assert.Equal(ct, domain.RolloutHalted, ro.Status.Phase)
	})
	require.Equal(t, "acme", ro.Status.Halt.Tenant)
	require.Equal(t, "wave 1 (spec.progressDeadline) passed its deadline of 10m waiting for "+what+
		"; last answer: acme: upgrade t113 running; cp-1: waiting for cp-1 to run Talos v1.13.1: connection reset by peer", ro.Status.Halt.Reason)
	require.Contains(t, ro.Status.Message, "halted at tenant acme: wave 1 (spec.progressDeadline) passed its deadline")
}

// TestSoakIsAWait: a wave whose tenants are done soaks with a wait that says
// what it watches until soakUntil, and the rollout succeeds at its end with
// the wait cleared.
func TestSoakIsAWait(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	e := newWaitEnv(t, t0)
	e.createRollout("t113", domain.RolloutSpec{Change: domain.RolloutChange{TalosVersion: "v1.13.1"}, Waves: []domain.RolloutWave{{Percent: 100}}, Soak: "10m"})
	e.start()
	e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		require.Len(ct, ro.Status.Tenants, 1)
		assert.Equal(ct, domain.RolloutTenantRunning, ro.Status.Tenants[0].State)
	})
	e.upgradeWritten("t113")
	e.clock.Advance(time.Minute)
	e.upgradeStatus("t113", domain.UpgradeStatus{Phase: domain.UpgradeSucceeded})
	e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		assert.Equal(ct, domain.RolloutWaveSoaking, ro.Status.Waves[0].State)
	})
	// The probes' answer is recorded WaitRecordEvery later.
	e.clock.Advance(time.Minute)
	ro := e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		require.NotNil(ct, ro.Status.Waves[0].Wait)
		assert.Equal(ct, "1 of 1 tenants Ready at the last probe", ro.Status.Waves[0].Wait.LastError)
	})
	w := ro.Status.Waves[0]
	require.Equal(t, "tenants of wave 1 to stay healthy through the soak", w.Wait.For)
	require.True(t, w.Wait.Deadline.Equal(*w.SoakUntil))
	require.True(t, w.Wait.Deadline.Equal(t0.Add(11*time.Minute)), "deadline %s", w.Wait.Deadline)
	require.Contains(t, w.WaitMessage(e.clock.Now()), "soaking: watching tenants of wave 1 to stay healthy through the soak")

	e.clock.Advance(9 * time.Minute)
	ro = e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		assert.Equal(ct, domain.RolloutSucceeded, ro.Status.Phase)
	})
	require.Nil(t, ro.Status.Waves[0].Wait)
}
