package rollout_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/configsync"
	"github.com/rezuscloud/rezuscloud/controllers/rollout"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// readyProber answers every tenant Ready, probed now.
type readyProber struct{}

func (readyProber) Probe(_ context.Context, tenant string, _ bool) (domain.TenantHealth, error) {
	return domain.TenantHealth{Tenant: tenant, State: domain.HealthReady, ObservedAt: time.Now()}, nil
}

func run(t *testing.T, c *talostest.Cluster, start func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(c.Ctx)
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func waitRollout(t *testing.T, c *talostest.Cluster, name string, until func(*domain.Rollout) bool) *domain.Rollout {
	t.Helper()
	var ro *domain.Rollout
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Cache.Sync(c.Ctx))
		got, ok, err := projections.Get[domain.Rollout](c.Cache, domain.ObjectRef(domain.RolloutKind, "", name))
		require.NoError(ct, err)
		require.True(ct, ok)
		ro = got
		assert.True(ct, until(ro), "rollout %s: %s (%s)", name, ro.Status.Phase, ro.Status.Message)
	}, 60*time.Second, 20*time.Millisecond)
	return ro
}

// TestConfigPatchRollout rolls a config patch onto a tenant of emulated
// nodes through the real config controller: the ConfigPatch is written
// (labelled with the rollout) and the tenant is Done once every machine
// holds the rendered config. A patch that machinery refuses fails the
// tenant and halts the rollout, naming it.
func TestConfigPatchRollout(t *testing.T) {
	c := talostest.Start(t, 1, 1)
	for _, g := range []struct{ name, spec string }{{"cp", `{"role":"controlplane","count":1,"provider":"emu"}`}, {"workers", `{"role":"worker","count":1,"provider":"emu"}`}} {
		c.Execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.NodeGroupKind, c.Tenant, g.name),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: g.name, Tenant: c.Tenant}, Spec: json.RawMessage(g.spec)}})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := talos.NewService(c.Cache, c.PKI)
	cs := configsync.New(configsync.Config{Store: c.Store, Cache: c.Cache, Talos: svc, Holder: "test", Nodes: talos.NodeAPI{Timeout: 5 * time.Second},
		Log: quiet, CallTimeout: 5 * time.Second, Debounce: 10 * time.Millisecond, BackoffBase: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		PollInterval: 5 * time.Millisecond, RebootDownWait: time.Second, RebootTimeout: 20 * time.Second})
	run(t, c, cs.Run)
	cfg := rollout.Config{Store: c.Store, Cache: c.Cache, Prober: readyProber{}, Configs: svc, Holder: "test", Interval: 50 * time.Millisecond, Log: quiet}
	require.NoError(t, cfg.Validate())
	ro := rollout.New(cfg)
	run(t, c, ro.Run)
	require.Eventually(t, ro.Leading, 30*time.Second, 5*time.Millisecond)

	create := func(name, patch string) {
		spec, err := json.Marshal(domain.RolloutSpec{Change: domain.RolloutChange{ConfigPatch: &domain.RolloutConfigPatch{Name: name,
			Spec: domain.ConfigPatchSpec{Patch: patch}}}, Soak: "0s"})
		require.NoError(t, err)
		c.Execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.RolloutKind, "", name),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name}, Spec: spec}})
	}
	create("labels", "machine:\n  nodeLabels:\n    fleet: blue\n")
	got := waitRollout(t, c, "labels", func(r *domain.Rollout) bool { return r.Status.Finished() || r.Status.Halted() })
	require.Equal(t, domain.RolloutSucceeded, got.Status.Phase, got.Status.Message)
	require.Equal(t, domain.RolloutTenantDone, got.Status.Tenants[0].State)
	require.Contains(t, got.Status.Tenants[0].Message, "every machine (2) holds the patch")
	p := talostest.GetAs[domain.ConfigPatch](t, c.Cache, domain.ObjectRef(domain.ConfigPatchKind, c.Tenant, "labels"))
	require.Equal(t, "labels", p.Metadata.Labels[domain.LabelRollout])
	prog, err := svc.ConfigProgress(c.Ctx, c.Tenant, time.Time{})
	require.NoError(t, err)
	require.Empty(t, prog.Pending)

	create("broken", "machine:\n  notAField: 1\n")
	got = waitRollout(t, c, "broken", func(r *domain.Rollout) bool { return r.Status.Finished() || r.Status.Halted() })
	require.Equal(t, domain.RolloutHalted, got.Status.Phase, got.Status.Message)
	require.Equal(t, c.Tenant, got.Status.Halt.Tenant)
	require.Contains(t, got.Status.Halt.Reason, "the config did not apply")
}
