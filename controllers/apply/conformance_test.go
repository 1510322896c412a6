package apply

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// gatedApplies is fakeTofu with its applies behind the kit's gate: a run
// waits there before the apply whose record the kit counts.
type gatedApplies struct {
	gate *controllertest.Gate
	fake *fakeTofu
}

func (g gatedApplies) RunTofu(ctx context.Context, dir string, env []string, out io.Writer, args ...string) error {
	if args[0] == "apply" {
		if err := g.gate.Pass(ctx); err != nil {
			return err
		}
	}
	return g.fake.RunTofu(ctx, dir, env, out, args...)
}

// conformanceFixture is what the replicas of one subtest share, as servers
// share a store: tofu's state (the fake's), the sealed secrets, the logs.
type conformanceFixture struct {
	fake    *fakeTofu
	secrets *eventstore.SealedSecrets
	logs    *tofu.Logs
}

// TestConformance: a new tenant's infrastructure is applied and its machine
// recorded once, whether the leader restarts or loses the lease mid-apply or
// the tenant's key is redelivered.
func TestConformance(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	state, err := os.ReadFile(filepath.Join("..", "..", "providers", "testdata", "state_emulated.json"))
	require.NoError(t, err)
	// Path must resolve; the fake runs instead of it.
	self, err := os.Executable()
	require.NoError(t, err)
	controllertest.Conformance(t, controllertest.Subject[conformanceFixture]{
		Lease: WorkerLease, Consumer: WorkerConsumer, Queue: QueueBucket,
		Setup: func(e *controllertest.Env) conformanceFixture {
			plain, err := eventstore.OpenSecrets(e.Ctx, e.Store)
			require.NoError(e.T, err)
			sealed, err := eventstore.OpenSealedSecrets(e.Ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(e.T.TempDir(), "secrets.key")})
			require.NoError(e.T, err)
			logs, err := tofu.OpenLogs(e.Ctx, e.Store)
			require.NoError(e.T, err)
			return conformanceFixture{fake: newFakeTofu(state), secrets: sealed, logs: logs}
		},
		Replica: func(e *controllertest.Env, f conformanceFixture, holder string) controllertest.Replica {
			cache := projections.NewCache(e.Store, nil)
			controllertest.Start(e.T, e.Ctx, cache.Run)
			// The worker debounces at its clock: the kit's, standing still,
			// would never make a key due. The wall clock makes the kit's
			// entries (queued at its earlier time) due at once.
			cfg := Config{
				Store: e.Store, Cache: cache, Bundles: talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: f.secrets, Log: quiet}), Logs: f.logs,
				Tofu:    tofu.Binary{Bin: self, Runner: gatedApplies{gate: e.Gate, fake: f.fake}},
				WorkDir: e.T.TempDir(), BackendURL: "http://127.0.0.1:1", Credentials: f.fake, State: f.fake, Holder: holder,
				StateKeys: eventstore.NewStateKeys(f.secrets), Log: quiet,
				Debounce: 10 * time.Millisecond, MaxDelay: time.Second, Resync: -1,
				BackoffBase: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond, Clock: controller.RealClock(nil),
			}
			require.NoError(e.T, cfg.Validate())
			return NewWorker(cfg)
		},
		Work: func(e *controllertest.Env, _ conformanceFixture) string {
			create := func(ref domain.Ref, spec string) {
				e.T.Helper()
				_, err := e.Store.Execute(e.Ctx, domain.Command{Op: domain.OpCreate, Ref: ref,
					Object: &domain.Object{Metadata: domain.ObjectMeta{Name: ref.Name, Tenant: ref.Tenant}, Spec: json.RawMessage(spec)},
					Actor:  "test", Now: e.Clock.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{Retries: 5})
				require.NoError(e.T, err, "creating %s", ref)
			}
			create(domain.ObjectRef(domain.ProviderKind, "", "emulated"), `{"type":"emulated","config":{"endpoint":"http://127.0.0.1:8089"}}`)
			create(domain.TenantRef("acme"), `{}`)
			// The node group last: a tenant without one is not queued.
			create(domain.ObjectRef(domain.NodeGroupKind, "acme", "cp"), `{"role":"controlplane","count":1,"provider":"emulated"}`)
			return "acme"
		},
		// A run records an Apply each time (a redelivered change runs tofu
		// again, which changes nothing): the effect is the machine the
		// apply made, projected from its state once.
		Effects: func(e *controllertest.Env, _ conformanceFixture, _ string) (int, error) {
			return controllertest.CountEvents(e.Ctx, e.Store, func(ev *domain.Event) bool {
				return ev.Actor == WorkerActor && ev.Object.Kind == domain.MachineKind.Kind && ev.Action == domain.ActionCreated
			})
		},
	})
}
