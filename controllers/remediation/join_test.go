package remediation_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strconv"
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
	// holder names the replica start runs the controller as.
	holder string
}

func newEnv(t *testing.T, start time.Time) *env {
	ctx, cancel := context.WithCancel(context.Background())
	es := eventstoretest.Start(t)
	cache := projections.NewCache(es.Store, nil)
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &env{t: t, ctx: ctx, store: es.Store, cache: cache, clock: controllertest.NewClock(start), holder: "r1"}
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
	cfg := remediation.Config{Store: e.store, Cache: e.cache, Prober: quietProber{}, Holder: e.holder, Clock: e.clock,
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
	require.Equal(t, "r1", r.Status.Replica, "the replica watching the join")

	// Restarted mid-wait on another replica, with startupTimeout raised
	// meanwhile and another answer from the probe: the recorded deadline
	// holds, and the wait names the replica that took it up.
	stop()
	e.holder = "r2"
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
	require.Equal(t, "r2", r.Status.Replica)

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

// groupAllowed waits until the group's RemediationAllowed condition
// satisfies until.
func (e *env) groupAllowed(until func(*assert.CollectT, *domain.Condition)) {
	e.t.Helper()
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		ng, ok, err := projections.Get[domain.NodeGroup](e.cache, domain.ObjectRef(domain.NodeGroupKind, "acme", "workers"))
		require.NoError(ct, err)
		require.True(ct, ok)
		c := domain.FindCondition(ng.Status.Conditions, domain.ConditionRemediationAllowed)
		require.NotNil(ct, c)
		until(ct, c)
	}, 30*time.Second, 10*time.Millisecond)
}

// TestReplacesAnUnhealthyMachine: a machine unhealthy for longer than its
// group's unhealthyAfter gets a Remediation, named by the machine and when
// it began, labelled with its group and machine, whose first step says
// since when and why; the group says replacing is allowed. A second
// machine going down meanwhile makes too many unhealthy: the group says
// so, and nothing more is replaced. Once the apply worker reports the new
// machine built and it is found healthy, the remediation succeeds.
func TestReplacesAnUnhealthyMachine(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	e := newEnv(t, t0)
	e.create(domain.TenantKind, "", "acme", map[string]any{})
	e.create(domain.NodeGroupKind, "acme", "workers", domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 2, Provider: "emu",
		Remediation: &domain.RemediationPolicy{UnhealthyAfter: "5m"}})
	for _, m := range []string{"w-1", "w-2"} {
		e.create(domain.MachineKind, "acme", m, domain.MachineSpec{NodeGroup: "workers", Role: domain.RoleWorker, Address: "10.0.0.1"})
	}
	ever := t0.Add(-time.Hour)
	health := func(machine, status, reason string, since time.Time, firstHealthy *time.Time) {
		e.setStatus(domain.MachineKind, "acme", machine, domain.MachineStatus{FirstHealthy: firstHealthy,
			Conditions: []domain.Condition{{Type: domain.ConditionHealthy, Status: status, Reason: reason, LastTransitionTime: since}}})
	}
	health("w-1", "True", "Healthy", ever, &ever)
	health("w-2", "False", "Unreachable", t0.Add(-10*time.Minute), &ever)

	e.start()
	name := "w-2-" + strconv.FormatInt(t0.Unix(), 16)
	r := e.remediationUntil(name, func(ct *assert.CollectT, r *domain.Remediation) { require.NotEmpty(ct, r.Status.Steps) })
	require.Equal(t, domain.RemediationSpec{NodeGroup: "workers", Machine: "w-2", Role: domain.RoleWorker, Reason: "Unreachable",
		UnhealthySince: t0.Add(-10 * time.Minute)}, r.Spec)
	require.Equal(t, map[string]string{"rezuscloud.io/nodegroup": "workers", "rezuscloud.io/machine": "w-2"}, r.Metadata.Labels)
	require.Equal(t, "Detected", r.Status.Steps[0].Name)
	require.Equal(t, "w-2 unhealthy since 2026-12-04T09:50:00Z: Unreachable", r.Status.Steps[0].Message)
	require.Equal(t, "r1", r.Status.Replica, "the replica that detected it")
	require.False(t, r.Status.Finished())
	e.groupAllowed(func(ct *assert.CollectT, c *domain.Condition) {
		assert.Equal(ct, "True", c.Status)
		assert.Equal(ct, domain.RemediationReasonAllowed, c.Reason)
	})

	// w-1 goes down too: 2 of 2 is more than maxUnhealthy (1 by default).
	// No event announces a probe's finding: the next look, an interval
	// after the last run ended, sees it.
	health("w-1", "False", "NodeNotReady", t0, &ever)
	require.Eventually(t, func() bool { return slices.Contains(e.clock.Waits(), t0.Add(15*time.Second)) }, 30*time.Second, 5*time.Millisecond)
	e.clock.Advance(15 * time.Second)
	e.groupAllowed(func(ct *assert.CollectT, c *domain.Condition) {
		assert.Equal(ct, "False", c.Status)
		assert.Equal(ct, domain.RemediationReasonTooMany, c.Reason)
		assert.Equal(ct, "2 of 2 machines are unhealthy, more than maxUnhealthy allows (1): nothing is replaced until fewer are", c.Message)
	})
	rems, err := projections.List[domain.Remediation](e.cache, domain.RemediationKind, projections.ListOptions{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, rems, 1, "one machine at a time")

	// The apply worker built the new w-2 and it was found healthy.
	built := e.clock.Now()
	joined := built.Add(90 * time.Second)
	health("w-2", "True", "Healthy", joined, &joined)
	e.setStatus(domain.RemediationKind, "acme", name, domain.RemediationStatus{Phase: domain.RemediationJoining, Apply: "a-1",
		ReplacedAt: &built, Steps: r.Status.Steps})
	r = e.remediationUntil(name, func(ct *assert.CollectT, r *domain.Remediation) {
		assert.Equal(ct, domain.RemediationSucceeded, r.Status.Phase)
	})
	require.Equal(t, "the new w-2 is healthy, 1m30s after it was built", r.Status.Message)
	require.Equal(t, "Joined", r.Status.Steps[len(r.Status.Steps)-1].Name)
	require.Nil(t, r.Status.Wait)
	require.Equal(t, "r1", r.Status.Replica, "the replica that saw it join, after the apply worker's steps")
}
