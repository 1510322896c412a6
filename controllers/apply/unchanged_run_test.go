package apply

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// reconciledAt waits until the tenant's Reconciled condition is for
// generation and returns it.
func (e *runEnv) reconciledAt(tenant string, generation int64) domain.Condition {
	e.t.Helper()
	var c domain.Condition
	require.Eventually(e.t, func() bool {
		tn, ok := e.tenant(tenant)
		if !ok || tn.Status.ObservedGeneration != generation {
			return false
		}
		found := domain.FindCondition(tn.Status.Conditions, "Reconciled")
		if found == nil || found.ObservedGeneration != generation || found.Status != "True" {
			return false
		}
		c = *found
		return true
	}, 20*time.Second, 10*time.Millisecond, "tenant %s reconciled at generation %d", tenant, generation)
	return c
}

func (e *runEnv) updateSpec(ref domain.Ref, spec string) int64 {
	e.t.Helper()
	obj, ok := e.cache.GetObject(ref)
	require.True(e.t, ok)
	next := obj.DeepCopy()
	next.Spec = json.RawMessage(spec)
	e.execute(domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next})
	got, _ := e.cache.GetObject(ref)
	return got.Metadata.Generation
}

// TestNoTofuRunWithoutAChange: a version write-back (new machine configs,
// nothing tofu acts on) and a re-sent spec make no Apply and run no tofu;
// a change tofu acts on, or a state written by someone else, does.
func TestNoTofuRunWithoutAChange(t *testing.T) {
	e := newRunEnv(t)
	e.createTenant("a")
	e.waitApplies("a", domain.ApplySucceeded)
	require.NotNil(t, readApplied(e.worker.tenantDir("a")), "a successful run records what it applied")
	applies := len(e.tofu.callsOf("apply"))

	// The upgrade saga's write-back: the tenant's Talos version moves, so
	// every machine's config does; the emulated machines ignore user data.
	gen := e.updateSpec(domain.TenantRef("a"), `{"talosVersion":"v1.13.1"}`)
	c := e.reconciledAt("a", gen)
	require.Equal(t, ReasonUnchanged, c.Reason, c.Message)
	require.Contains(t, c.Message, "nothing tofu acts on changed")
	e.waitApplies("a", domain.ApplySucceeded) // no second Apply
	require.Len(t, e.tofu.callsOf("apply"), applies, "no tofu apply")

	// The node group's spec re-sent with a label nothing generated reads:
	// a run, no Apply, no tofu.
	skipped := e.worker.Unchanged()
	ng := domain.ObjectRef(domain.NodeGroupKind, "a", "cp")
	obj, _ := e.cache.GetObject(ng)
	next := obj.DeepCopy()
	next.Metadata.Labels = map[string]string{"team": "blue"}
	e.execute(domain.Command{Op: domain.OpUpdate, Ref: ng, Object: next})
	require.Eventually(t, func() bool { return e.worker.Unchanged() > skipped }, 20*time.Second, 10*time.Millisecond)
	e.waitApplies("a", domain.ApplySucceeded)
	require.Len(t, e.tofu.callsOf("apply"), applies)

	// A machine more: tofu acts on it.
	e.updateSpec(domain.ObjectRef(domain.NodeGroupKind, "a", "cp"), `{"role":"controlplane","count":3,"provider":"emulated"}`)
	e.waitApplies("a", domain.ApplySucceeded, domain.ApplySucceeded)
	require.Len(t, e.tofu.callsOf("apply"), applies+1)

	// The state written by another writer since: the next run runs tofu,
	// though the configuration is the same.
	e.tofu.set(func(f *fakeTofu) { f.revision++ })
	gen = e.updateSpec(domain.TenantRef("a"), `{"talosVersion":"v1.13.0"}`)
	e.waitApplies("a", domain.ApplySucceeded, domain.ApplySucceeded, domain.ApplySucceeded)
	require.Len(t, e.tofu.callsOf("apply"), applies+2)
	require.Equal(t, "ApplySucceeded", e.reconciledAt("a", gen).Reason)
}

// TestTheRecordGoesBeforeTofuRuns: a run removes the record of the last
// successful one before tofu may change anything, so a run that dies or
// fails (kill -9 included) leaves none and the next run runs tofu; the
// retry of a failed run that succeeds records again.
func TestTheRecordGoesBeforeTofuRuns(t *testing.T) {
	e := newRunEnv(t)
	e.createTenant("a")
	e.waitApplies("a", domain.ApplySucceeded)
	dir := e.worker.tenantDir("a")
	first := readApplied(dir)
	require.NotNil(t, first)

	recorded := make(chan bool, 4)
	e.tofu.set(func(f *fakeTofu) {
		f.failApplies = 1
		f.onApply = func([]string) { recorded <- readApplied(dir) != nil }
	})
	e.updateSpec(domain.ObjectRef(domain.NodeGroupKind, "a", "cp"), `{"role":"controlplane","count":3,"provider":"emulated"}`)
	e.waitApplies("a", domain.ApplySucceeded, domain.ApplyFailed, domain.ApplySucceeded)
	require.False(t, <-recorded, "no record while the failing apply ran")
	require.False(t, <-recorded, "no record while its retry ran")
	again := readApplied(dir)
	require.NotNil(t, again, "the successful retry recorded")
	require.NotEqual(t, first.Inputs, again.Inputs)
}

// TestInitOnlyWhenProvidersOrModulesChange: a run inits tofu when the
// providers or modules it installs changed, not when a module's inputs did.
func TestInitOnlyWhenProvidersOrModulesChange(t *testing.T) {
	e := newRunEnv(t)
	e.createTenant("a")
	e.waitApplies("a", domain.ApplySucceeded)
	require.Len(t, e.tofu.callsOf("init"), 1, "the first run inits")

	// Two machines more: the module call's inputs change, its source does not.
	e.updateSpec(domain.ObjectRef(domain.NodeGroupKind, "a", "cp"), `{"role":"controlplane","count":3,"provider":"emulated"}`)
	e.waitApplies("a", domain.ApplySucceeded, domain.ApplySucceeded)
	require.Len(t, e.tofu.callsOf("init"), 1, "no init for a module's new inputs")

	// A node group on a second Provider: a second module call to install.
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.ProviderKind, "", "emulated-b"),
		Object: &domain.Object{Spec: json.RawMessage(`{"type":"emulated","config":{"endpoint":"http://127.0.0.1:8090"}}`)}})
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.NodeGroupKind, "a", "w"),
		Object: &domain.Object{Spec: json.RawMessage(`{"role":"worker","count":1,"provider":"emulated-b"}`)}})
	e.waitApplies("a", domain.ApplySucceeded, domain.ApplySucceeded, domain.ApplySucceeded)
	require.Len(t, e.tofu.callsOf("init"), 2, "a new module is installed")
	require.Empty(t, e.tofu.callsOf("state"), "the state is read from the store and decrypted here, by no tofu process")
}

// TestARedeliveredChangeMakesNoApply: a change's event that comes again
// after the run it asked for succeeded (its replica stopped before the
// event was acknowledged) makes no Apply and runs no tofu, even on a
// replica without the record of what tofu last saw; a change since does.
func TestARedeliveredChangeMakesNoApply(t *testing.T) {
	e := newRunEnv(t)
	e.createTenant("a")
	first := e.waitApplies("a", domain.ApplySucceeded)[0]
	require.NotEmpty(t, first.Spec.Sources)
	applies := len(e.tofu.callsOf("apply"))
	// Another replica: no record of the last run in its work dir.
	require.NoError(t, forgetApplied(e.worker.tenantDir("a")))

	kv, err := openQueue(e.ctx, e.store)
	require.NoError(t, err)
	queuedAndDone := func(sources ...string) {
		t.Helper()
		w, err := kv.Watch(e.ctx, "a", jetstream.UpdatesOnly())
		require.NoError(t, err)
		defer func() { _ = w.Stop() }()
		for _, s := range sources {
			require.NoError(t, enqueue(e.ctx, kv, "a", s, time.Now()))
		}
		for u := range w.Updates() {
			if u != nil && u.Operation() != jetstream.KeyValuePut {
				return // the run took the entry and finished it
			}
		}
	}
	queuedAndDone(first.Spec.Sources[0])
	e.waitApplies("a", domain.ApplySucceeded)
	require.Len(t, e.tofu.callsOf("apply"), applies, "no tofu for a change applied")

	queuedAndDone(first.Spec.Sources[0], "NodeGroup/cp@999999")
	e.waitApplies("a", domain.ApplySucceeded, domain.ApplySucceeded)
	require.Len(t, e.tofu.callsOf("apply"), applies+1, "a change since runs tofu")
}
