package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// runEnv is a running apply worker on real embedded NATS whose tofu is a
// fakeTofu: retries, cancel and destroy run in-process, without tofu.
type runEnv struct {
	t      *testing.T
	ctx    context.Context
	store  *eventstore.Store
	conn   *nats.Conn
	cache  *projections.Cache
	tofu   *fakeTofu
	worker *Worker
	dir    string
	// secrets is the sealed store the worker's state keys live in.
	secrets *eventstore.SealedSecrets
}

// newRunEnv starts the worker; opts adjust its config (a fake Metal, ...).
func newRunEnv(t *testing.T, opts ...func(*Config)) *runEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	env := eventstoretest.Start(t)
	cache := projections.NewCache(env.Store, nil)
	done := make(chan error, 2)
	go func() { done <- cache.Run(ctx) }()
	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	secretStore, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	logs, err := tofu.OpenLogs(ctx, env.Store)
	require.NoError(t, err)
	state, err := os.ReadFile(filepath.Join("..", "..", "providers", "testdata", "state_emulated.json"))
	require.NoError(t, err)
	fake := newFakeTofu(state)
	// Path must resolve; the fake runs instead of it.
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	cfg := Config{
		Store: env.Store, Cache: cache, Bundles: talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: secretStore}), Logs: logs,
		Tofu:    tofu.Binary{Bin: self, Runner: fake},
		WorkDir: dir, BackendURL: "http://127.0.0.1:1", Credentials: fake, State: fake, Holder: "host-a-42",
		StateKeys: eventstore.NewStateKeys(secretStore),
		// A tenant and its node group, created back to back, make one run.
		Debounce: 300 * time.Millisecond, MaxDelay: 2 * time.Second, Resync: -1,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	w := NewWorker(cfg)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			require.NoError(t, <-done)
		}
	})
	// The worker's consumer delivers only events after it is provisioned.
	require.Eventually(t, w.Leading, 20*time.Second, 10*time.Millisecond)
	e := &runEnv{t: t, ctx: ctx, store: env.Store, conn: env.Conn, cache: cache, tofu: fake, worker: w, dir: dir, secrets: secretStore}
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.ProviderKind, "", "emulated"),
		Object: &domain.Object{Spec: json.RawMessage(`{"type":"emulated","config":{"endpoint":"http://127.0.0.1:8089"}}`)}})
	return e
}

func (e *runEnv) execute(cmd domain.Command) {
	e.t.Helper()
	if cmd.Object != nil {
		cmd.Object.Metadata.Name, cmd.Object.Metadata.Tenant = cmd.Ref.Name, cmd.Ref.Tenant
	}
	cmd.Actor, cmd.Now, cmd.NewUID = "test", time.Now(), uuid.NewString()
	res, err := e.store.Execute(e.ctx, cmd, eventstore.UpdateOptions{Retries: 5})
	require.NoError(e.t, err)
	require.NoError(e.t, e.cache.WaitFor(e.ctx, res.Seq))
}

// createTenant creates a tenant with one control plane of the emulated provider.
func (e *runEnv) createTenant(name string) {
	e.t.Helper()
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef(name), Object: &domain.Object{Spec: json.RawMessage(`{}`)}})
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.NodeGroupKind, name, "cp"),
		Object: &domain.Object{Spec: json.RawMessage(`{"role":"controlplane","count":1,"provider":"emulated"}`)}})
}

// applies is the tenant's Apply records, oldest first.
func (e *runEnv) applies(tenant string) []domain.Apply {
	as, err := projections.List[domain.Apply](e.cache, domain.ApplyKind, projections.ListOptions{Tenant: tenant})
	require.NoError(e.t, err)
	sort.Slice(as, func(i, j int) bool { return as[i].Metadata.Name < as[j].Metadata.Name })
	return as
}

// waitApplies waits until the tenant's applies are final and their phases are want.
func (e *runEnv) waitApplies(tenant string, want ...string) []domain.Apply {
	e.t.Helper()
	var as []domain.Apply
	require.Eventually(e.t, func() bool {
		as = e.applies(tenant)
		var got []string
		for _, a := range as {
			got = append(got, a.Status.Phase)
		}
		return slices.Equal(got, want)
	}, 20*time.Second, 10*time.Millisecond, "applies of %s: want phases %v", tenant, want)
	return as
}

func (e *runEnv) tenant(name string) (*domain.Tenant, bool) {
	t, ok, err := projections.Get[domain.Tenant](e.cache, domain.TenantRef(name))
	require.NoError(e.t, err)
	return t, ok
}

func TestWorkerRetriesAFailedApplyWithBackoff(t *testing.T) {
	e := newRunEnv(t)
	e.tofu.set(func(f *fakeTofu) { f.failApplies = 1 })
	e.createTenant("acme")

	as := e.waitApplies("acme", domain.ApplyFailed, domain.ApplySucceeded)
	failed, ok := as[0], as[1]
	require.Equal(t, domain.TriggerChange, failed.Spec.Trigger)
	require.Equal(t, 1, failed.Status.Attempt)
	require.Equal(t, `emulated_machine.cp["cp-0"]: Could not create emulated machine: the emulator is not answering`, failed.Status.Error,
		"the error is tofu's diagnostic, not its exit status")
	require.Equal(t, domain.TriggerRetry, ok.Spec.Trigger)
	require.Equal(t, 2, ok.Status.Attempt)
	require.Equal(t, domain.ApplyResources{Added: 1}, ok.Status.Resources)
	require.False(t, ok.Status.StartTime.Before(*failed.Status.EndTime), "the retry waits for the failure")
	// Each run names the replica that ran it, in its status and in its log's first line.
	for _, a := range as {
		require.Equal(t, "host-a-42", a.Status.Replica)
		require.Equal(t, "host-a-42", a.Status.Holder, "the earlier name is still written")
		var log []byte
		require.NoError(t, e.worker.cfg.Logs.Follow(e.ctx, "acme", a.Metadata.Name, false, func(b []byte) error {
			log = append(log, b...)
			return nil
		}))
		first, _, _ := strings.Cut(string(log), "\n")
		require.Equal(t, fmt.Sprintf("[rezuscloud] apply %s of tenant acme (trigger %s, attempt %d) run by replica host-a-42",
			a.Metadata.Name, a.Spec.Trigger, a.Status.Attempt), first)
	}

	applies := e.tofu.applies()
	require.Len(t, applies, 2)
	for _, a := range applies {
		require.Equal(t, []string{"apply", "-auto-approve", "-input=false", "-json", "-no-color"}, a)
	}
	// tofu runs in the tenant's work dir with only the environment it needs.
	for _, c := range e.tofu.callsOf("apply") {
		require.Equal(t, filepath.Join(e.dir, "tenants", "acme"), c.Dir)
		require.Contains(t, c.Env, "TF_HTTP_PASSWORD=secret-of-acme")
		require.Contains(t, c.Env, "TF_IN_AUTOMATION=1")
		for _, kv := range c.Env {
			name, _, _ := strings.Cut(kv, "=")
			require.Contains(t, []string{"PATH", "HOME", "TMPDIR", "TF_CLI_CONFIG_FILE", "TF_IN_AUTOMATION", "TF_INPUT",
				"CHECKPOINT_DISABLE", "TF_HTTP_USERNAME", "TF_HTTP_PASSWORD", "TF_ENCRYPTION"}, name, "nothing inherited from the server")
		}
	}
	// Each run's state credentials end with it, failed or not.
	issued, revoked := e.tofu.credentials()
	require.Len(t, issued, 2)
	require.ElementsMatch(t, issued, revoked, "every run's state credentials are revoked when it ends")
	// Without a passphrase, state is encrypted under the tenant's generated
	// key, the same on every run.
	key, err := eventstore.NewStateKeys(e.secrets).StateKey(e.ctx, "acme")
	require.NoError(t, err)
	want, err := tofu.KeyEncryptionConfig(key)
	require.NoError(t, err)
	for _, c := range slices.Concat(e.tofu.callsOf("init"), e.tofu.callsOf("state"), e.tofu.callsOf("apply")) {
		require.Contains(t, c.Env, "TF_ENCRYPTION="+want, "tofu %v encrypts state with the tenant's key", c.Args)
	}
	require.Eventually(t, func() bool {
		tn, _ := e.tenant("acme")
		return tn.Status.Phase == "Ready" && slices.Contains(tn.Metadata.Finalizers, InfraFinalizer)
	}, 10*time.Second, 10*time.Millisecond)
	_, ok2, err := projections.Get[domain.Machine](e.cache, domain.ObjectRef(domain.MachineKind, "acme", "cp-0"))
	require.NoError(t, err)
	require.True(t, ok2, "the state is projected into machines")
}

func TestWorkerCancelInterruptsARunningApply(t *testing.T) {
	e := newRunEnv(t)
	e.tofu.set(func(f *fakeTofu) { f.block = true })
	e.createTenant("acme")

	select {
	case <-e.tofu.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the apply did not start")
	}
	as := e.applies("acme")
	require.Len(t, as, 1)
	require.NoError(t, Cancel(e.ctx, e.conn, "acme", as[0].Metadata.Name))

	as = e.waitApplies("acme", domain.ApplyCanceled)
	require.Equal(t, "canceled by a user", as[0].Status.Error)
	issued, revoked := e.tofu.credentials()
	require.Equal(t, []string{"apply-" + as[0].Metadata.Name}, issued)
	require.Equal(t, issued, revoked, "a canceled run's state credentials are revoked too")
	calls := e.tofu.callsOf("apply")
	require.Len(t, calls, 1)
	require.True(t, calls[0].Interrupted, "tofu was interrupted, not left running")
	require.Eventually(t, func() bool {
		tn, _ := e.tenant("acme")
		for _, c := range tn.Status.Conditions {
			if c.Type == "Reconciled" && c.Reason == "ApplyCanceled" {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	// The run leaves the worker's books just after its last status write.
	require.Eventually(t, func() bool {
		return errors.Is(Cancel(e.ctx, e.conn, "acme", as[0].Metadata.Name), ErrNotRunning)
	}, 10*time.Second, 10*time.Millisecond, "a cancel of an ended apply says it is not running")
	// A canceled run is done with: the tenant leaves the queue, no retry comes.
	kv, err := openQueue(e.ctx, e.store)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := kv.Get(e.ctx, "acme")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, 10*time.Second, 10*time.Millisecond)
	require.Len(t, e.tofu.callsOf("apply"), 1)
}

func TestWorkerDestroysBeforeTheFinalizerGoes(t *testing.T) {
	e := newRunEnv(t)
	e.createTenant("acme")
	e.waitApplies("acme", domain.ApplySucceeded)
	tn, _ := e.tenant("acme")
	require.Contains(t, tn.Metadata.Finalizers, InfraFinalizer)
	_, err := e.secrets.Get(e.ctx, "tfstate-key.acme")
	require.NoError(t, err, "the apply made the tenant's state key")

	// Whether the finalizer still holds the tenant when tofu destroys.
	held := make(chan bool, 1)
	e.tofu.set(func(f *fakeTofu) {
		f.onApply = func(args []string) {
			if slices.Contains(args, "-destroy") {
				rec, err := e.store.Load(e.ctx, domain.TenantRef("acme"))
				held <- err == nil && rec != nil && rec.State().Terminating() && slices.Contains(rec.State().Metadata.Finalizers, InfraFinalizer)
			}
		}
	})
	e.execute(domain.Command{Op: domain.OpDelete, Ref: domain.TenantRef("acme")})

	select {
	case h := <-held:
		require.True(t, h, "destroy runs while the infrastructure finalizer holds the tenant")
	case <-time.After(20 * time.Second):
		t.Fatal("tofu destroy did not run")
	}
	as := e.waitApplies("acme", domain.ApplySucceeded, domain.ApplySucceeded)
	require.Equal(t, domain.OperationDestroy, as[1].Spec.Operation)
	require.Equal(t, domain.TriggerDelete, as[1].Spec.Trigger)
	require.Equal(t, domain.ApplyResources{Destroyed: 1}, as[1].Status.Resources)
	require.Equal(t, []string{"apply", "-destroy", "-auto-approve", "-input=false", "-json", "-no-color"}, e.tofu.applies()[1])
	require.Eventually(t, func() bool {
		tn, ok := e.tenant("acme")
		return !ok || !slices.Contains(tn.Metadata.Finalizers, InfraFinalizer)
	}, 10*time.Second, 10*time.Millisecond, "the infrastructure finalizer goes after the destroy")
	e.tofu.mu.Lock()
	defer e.tofu.mu.Unlock()
	require.Equal(t, []string{"acme"}, e.tofu.deleted, "the state goes with it")
	_, err = e.secrets.Get(e.ctx, "tfstate-key.acme")
	require.ErrorIs(t, err, eventstore.ErrSecretNotFound, "and so does its key")
	_, err = os.Stat(filepath.Join(e.dir, "tenants", "acme"))
	require.True(t, os.IsNotExist(err), "and the work dir")
}

// TestPlanChangeCutShortSaysWhy: a dry run's plan that runs past its
// deadline is interrupted, and the error is the deadline's cause, not
// tofu's bare "execution halted"; a plan in time answers its summary.
// The ctx ends once tofu's plan runs: a 50 ms deadline, as this test had,
// sometimes passed while the run still read the state key (CI under load).
func TestPlanChangeCutShortSaysWhy(t *testing.T) {
	e := newRunEnv(t)
	e.createTenant("acme")
	e.waitApplies("acme", domain.ApplySucceeded)

	p, err := e.worker.PlanChange(e.ctx, "acme", talos.Change{})
	require.NoError(t, err)
	require.Equal(t, "0 to add, 0 to change, 0 to destroy", p.Summary)

	e.tofu.set(func(f *fakeTofu) { f.block = true })
	slow := errors.New("tofu's plan did not finish in time")
	ctx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-e.tofu.planBlocked:
			cancel(slow)
		case <-ctx.Done():
		}
	}()
	_, err = e.worker.PlanChange(ctx, "acme", talos.Change{})
	require.ErrorIs(t, err, slow)
	require.NotContains(t, err.Error(), "execution halted")
}

// staticCredentials are provider credentials by name.
type staticCredentials map[string]map[string]string

func (s staticCredentials) ProviderCredentials(_ context.Context, name string) (map[string]string, error) {
	v, ok := s[name]
	if !ok {
		return nil, domain.NewNotFound("ProviderCredentials", name)
	}
	return v, nil
}

// TestDestroyGetsTheCredentialsOfTheStatesProviders: a tenant's node groups
// are gone when its destroy runs (the tenant's deletion removes them
// first), so the credentials tofu gets are those of the Providers the
// state names. Before, they were the node groups' only: the destroy ran
// without them (and the emulator, whose token is such a credential since
// issue 42, refused it).
func TestDestroyGetsTheCredentialsOfTheStatesProviders(t *testing.T) {
	e := newRunEnv(t, func(c *Config) {
		c.ProviderCredentials = staticCredentials{"emu-creds": {"EMULATOR_TOKEN": "t0k"}}
	})
	rec, err := e.store.Load(e.ctx, domain.ObjectRef(domain.ProviderKind, "", "emulated"))
	require.NoError(t, err)
	p := rec.State().DeepCopy()
	p.Spec = json.RawMessage(`{"type":"emulated","config":{"endpoint":"http://127.0.0.1:8089"},"credentialsRef":{"name":"emu-creds"}}`)
	e.execute(domain.Command{Op: domain.OpUpdate, Ref: domain.ObjectRef(domain.ProviderKind, "", "emulated"), Object: p})
	e.createTenant("acme")
	e.waitApplies("acme", domain.ApplySucceeded)
	require.Contains(t, e.tofu.callsOf("apply")[0].Env, "EMULATOR_TOKEN=t0k")

	e.execute(domain.Command{Op: domain.OpDelete, Ref: domain.ObjectRef(domain.NodeGroupKind, "acme", "cp")})
	e.waitApplies("acme", domain.ApplySucceeded, domain.ApplySucceeded)
	e.execute(domain.Command{Op: domain.OpDelete, Ref: domain.TenantRef("acme")})
	as := e.waitApplies("acme", domain.ApplySucceeded, domain.ApplySucceeded, domain.ApplySucceeded)
	require.Equal(t, domain.OperationDestroy, as[2].Spec.Operation)
	applies := e.tofu.callsOf("apply")
	require.Len(t, applies, 3)
	require.Contains(t, applies[2].Args, "-destroy")
	require.Contains(t, applies[2].Env, "EMULATOR_TOKEN=t0k", "the destroy has the credentials of the state's provider")
}
