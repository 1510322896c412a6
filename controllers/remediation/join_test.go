package remediation_test

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

	"github.com/rezuscloud/rezuscloud/controllers/remediation"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// quietProber answers every probe with nothing new: the machines' statuses
// are what the test writes.
type quietProber struct{}

func (quietProber) Probe(_ context.Context, tenant string, _ bool) (domain.TenantHealth, error) {
	return domain.TenantHealth{Tenant: tenant}, nil
}

type env struct {
	t     *testing.T
	ctx   context.Context
	store *eventstore.Store
	cache *projections.Cache
	clock *controllertest.Clock
}

func newEnv(t *testing.T, start time.Time) *env {
	ctx, cancel := context.WithCancel(context.Background())
	es := eventstoretest.Start(t)
	cache := projections.NewCache(es.Store, nil)
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &env{t: t, ctx: ctx, store: es.Store, cache: cache, clock: controllertest.NewClock(start)}
}

func (e *env) execute(cmd domain.Command) {
	e.t.Helper()
	cmd.Actor, cmd.Now, cmd.NewUID = "test", time.Now(), uuid.NewString()
	res, err := e.store.Execute(e.ctx, cmd, eventstore.UpdateOptions{Retries: 5})
	require.NoError(e.t, err)
	require.NoError(e.t, e.cache.WaitFor(e.ctx, res.Seq))
}

func (e *env) create(kind *domain.KindInfo, tenant, name string, spec any) {
	e.t.Helper()
	raw, err := json.Marshal(spec)
	require.NoError(e.t, err)
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(kind, tenant, name),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: raw}})
}

func (e *env) setStatus(kind *domain.KindInfo, tenant, name string, status any) {
	e.t.Helper()
	raw, err := json.Marshal(status)
	require.NoError(e.t, err)
	e.execute(domain.Command{Op: domain.OpUpdateStatus, Ref: domain.ObjectRef(kind, tenant, name), Object: &domain.Object{Status: raw}})
}

// start runs a remediation controller until stop (or the test's end).
func (e *env) start() (stop func()) {
	e.t.Helper()
	cfg := remediation.Config{Store: e.store, Cache: e.cache, Prober: quietProber{}, Holder: "r1", Clock: e.clock,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	require.NoError(e.t, cfg.Validate())
	c := remediation.New(cfg)
	stop = controllertest.Start(e.t, e.ctx, c.Run)
	require.Eventually(e.t, c.Leading, 30*time.Second, 5*time.Millisecond)
	return stop
}

// remediationUntil waits until the remediation satisfies until.
func (e *env) remediationUntil(name string, until func(*assert.CollectT, *domain.Remediation)) *domain.Remediation {
	e.t.Helper()
	var r *domain.Remediation
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		got, ok, err := projections.Get[domain.Remediation](e.cache, domain.ObjectRef(domain.RemediationKind, "acme", name))
		require.NoError(ct, err)
		require.True(ct, ok)
		r = got
		until(ct, r)
	}, 30*time.Second, 10*time.Millisecond)
	return r
}

// TestJoiningWaitsWithItsDeadline: a Joining remediation records what it
// waits for (the new machine to be healthy), since when (the build) and
// until when (startupTimeout later), with the probe's answer; a controller
// restarted mid-wait keeps the recorded deadline although the group's
// startupTimeout was raised meanwhile, and records the new answer; at the
// deadline the remediation fails naming what it waited for and the last
// answer, and the wait is cleared.
func TestJoiningWaitsWithItsDeadline(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	e := newEnv(t, t0)
	e.create(domain.TenantKind, "", "acme", map[string]any{})
	group := func(startup string) domain.NodeGroupSpec {
		return domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 2, Provider: "emu",
			Remediation: &domain.RemediationPolicy{UnhealthyAfter: "5m", StartupTimeout: startup}}
	}
	e.create(domain.NodeGroupKind, "acme", "workers", group("10m"))
	for _, m := range []string{"w-1", "w-2"} {
		e.create(domain.MachineKind, "acme", m, domain.MachineSpec{NodeGroup: "workers", Role: domain.RoleWorker, Address: "10.0.0.1"})
	}
	ever := t0.Add(-time.Hour)
	e.setStatus(domain.MachineKind, "acme", "w-1", domain.MachineStatus{FirstHealthy: &ever,
		Conditions: []domain.Condition{{Type: domain.ConditionHealthy, Status: "True", Reason: "Healthy", LastTransitionTime: ever}}})
	unhealthy := func(reason, msg string) {
		e.setStatus(domain.MachineKind, "acme", "w-2", domain.MachineStatus{
			Conditions: []domain.Condition{{Type: domain.ConditionHealthy, Status: "False", Reason: reason, Message: msg, LastTransitionTime: t0}}})
	}
	unhealthy("Unreachable", "connection refused")
	built := t0.Add(-time.Minute)
	e.create(domain.RemediationKind, "acme", "w-2-1", domain.RemediationSpec{NodeGroup: "workers", Machine: "w-2", Role: domain.RoleWorker,
		Reason: "Unreachable", UnhealthySince: t0.Add(-time.Hour)})
	e.setStatus(domain.RemediationKind, "acme", "w-2-1", domain.RemediationStatus{Phase: domain.RemediationJoining, Apply: "a-1", ReplacedAt: &built})

	stop := e.start()
	r := e.remediationUntil("w-2-1", func(ct *assert.CollectT, r *domain.Remediation) {
		require.NotNil(ct, r.Status.Wait)
		assert.Equal(ct, "Unreachable: connection refused", r.Status.Wait.LastError)
	})
	w := r.Status.Wait
	require.Equal(t, "the new w-2 to be healthy", w.For)
	require.True(t, w.Since.Equal(built), "the wait began when the machine was built: %s", w.Since)
	require.True(t, w.Deadline.Equal(built.Add(10*time.Minute)), "deadline %s", w.Deadline)
	require.Equal(t, domain.RemediationJoining, r.Status.Phase)
	require.Equal(t, "waiting for the new w-2 to be healthy: Unreachable: connection refused, 1m (fails in 9m)", w.Message(t0))

	// Restarted mid-wait, with startupTimeout raised meanwhile and another
	// answer from the probe: the recorded deadline holds.
	stop()
	e.clock.Advance(5 * time.Minute)
	e.execute(domain.Command{Op: domain.OpUpdate, Ref: domain.ObjectRef(domain.NodeGroupKind, "acme", "workers"),
		Object: func() *domain.Object {
			raw, _ := json.Marshal(group("1h"))
			return &domain.Object{Metadata: domain.ObjectMeta{Name: "workers", Tenant: "acme"}, Spec: raw}
		}()})
	unhealthy("NodeNotReady", "kubelet stopped posting status")
	e.start()
	r = e.remediationUntil("w-2-1", func(ct *assert.CollectT, r *domain.Remediation) {
		require.NotNil(ct, r.Status.Wait)
		assert.Equal(ct, "NodeNotReady: kubelet stopped posting status", r.Status.Wait.LastError)
	})
	require.True(t, r.Status.Wait.Deadline.Equal(built.Add(10*time.Minute)), "deadline after the restart %s", r.Status.Wait.Deadline)
	require.True(t, r.Status.Wait.Since.Equal(built))

	// At the deadline it fails, naming what it waited for and the last answer.
	e.clock.Advance(built.Add(10 * time.Minute).Sub(e.clock.Now()))
	r = e.remediationUntil("w-2-1", func(ct *assert.CollectT, r *domain.Remediation) {
		assert.Equal(ct, domain.RemediationFailed, r.Status.Phase)
	})
	require.Nil(t, r.Status.Wait)
	require.Equal(t, "Joining (startupTimeout) passed its deadline of 10m waiting for the new w-2 to be healthy; last answer: NodeNotReady: kubelet stopped posting status", r.Status.Message)
	require.Equal(t, "Failed", r.Status.Steps[len(r.Status.Steps)-1].Name)
	require.True(t, r.Status.FinishedAt.Equal(built.Add(10*time.Minute)))
}
