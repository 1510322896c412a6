package upgrade_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// conformanceTarget is the version the kit's Upgrade takes the node to
// from the emulator's default (v1.13.0): a patch, which the saga allows.
const conformanceTarget = "v1.13.1"

// gatedUpgrades puts the kit's gate before every MachineService.Upgrade
// call the replicas make (a unary client interceptor, the saga's only
// hook into its Talos connections) and counts the calls the node took.
type gatedUpgrades struct {
	gate *controllertest.Gate

	mu    sync.Mutex
	taken int
}

func (g *gatedUpgrades) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != "/machine.MachineService/Upgrade" {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if err := g.gate.Pass(ctx); err != nil {
		return err
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil {
		g.mu.Lock()
		g.taken++
		g.mu.Unlock()
	}
	return err
}

func (g *gatedUpgrades) calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.taken
}

// conformanceFixture is what the replicas of one subtest share: emulated
// nodes booted on the kit's store from the tenant's PKI (its bundle sealed
// there), and the gate on their upgrade calls.
type conformanceFixture struct {
	cluster  *talostest.Cluster
	upgrades *gatedUpgrades
}

// TestConformance: an Upgrade of a one-control-plane tenant upgrades the
// node once and succeeds once, whether the leader restarts or loses the
// lease just before the node's upgrade call or the tenant's key is
// redelivered after the run succeeded.
func TestConformance(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	controllertest.Conformance(t, controllertest.Subject[conformanceFixture]{
		Lease: upgrade.Lease, Consumer: upgrade.Consumer, Queue: upgrade.Queue,
		Setup: func(e *controllertest.Env) conformanceFixture {
			return conformanceFixture{cluster: talostest.StartOn(e.T, e.Store, 1, 0), upgrades: &gatedUpgrades{gate: e.Gate}}
		},
		Replica: func(e *controllertest.Env, f conformanceFixture, holder string) controllertest.Replica {
			cache := projections.NewCache(e.Store, nil)
			controllertest.Start(e.T, e.Ctx, cache.Run)
			pki := talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: f.cluster.Sealed, Log: quiet})
			// The saga keeps time with Now (the wall clock by default): the
			// runtime's queue is due at once, whatever the kit's clock says.
			// A call waits at the gate within CallTimeout, which outlasts
			// the kit's waits: a call cut short by it would pass for one
			// the node may have taken, and the step would wait for a reboot
			// that never comes.
			return upgrade.New(upgrade.Config{Store: e.Store, Cache: cache, Bundles: pki, Configs: talos.NewService(cache, pki),
				Holder: holder, Log: quiet, CallTimeout: 2 * time.Minute, PollInterval: 5 * time.Millisecond,
				PrecheckTimeout: 10 * time.Second, RebootTimeout: 10 * time.Second, HealthTimeout: 10 * time.Second,
				Resync: -1, RetryBackoff: 50 * time.Millisecond,
				DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(f.upgrades.interceptor)}})
		},
		Work: func(e *controllertest.Env, f conformanceFixture) string {
			tenant := f.cluster.Tenant
			spec, err := json.Marshal(domain.UpgradeSpec{TalosVersion: conformanceTarget})
			require.NoError(e.T, err)
			_, err = e.Store.Execute(e.Ctx, domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.UpgradeKind, tenant, "up"),
				Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "up", Tenant: tenant}, Spec: spec},
				Actor:  "test", Now: e.Clock.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{Retries: 5})
			require.NoError(e.T, err, "creating the upgrade")
			return tenant
		},
		// The effect is the run's success and the node's upgrade: the
		// larger of the Upgrade's turns to Succeeded (by the saga) and the
		// upgrade calls the node took, so that either made twice counts
		// twice. Nothing counts before the run succeeded.
		Effects: func(e *controllertest.Env, f conformanceFixture, tenant string) (int, error) {
			var last string
			succeeded, err := controllertest.CountEvents(e.Ctx, e.Store, func(ev *domain.Event) bool {
				if ev.Object.Kind != domain.UpgradeKind.Kind || ev.Object.Metadata.Tenant != tenant || ev.Object.Metadata.Name != "up" {
					return false
				}
				var st domain.UpgradeStatus
				if len(ev.Object.Status) > 0 {
					if err := json.Unmarshal(ev.Object.Status, &st); err != nil {
						return false
					}
				}
				turned := ev.Actor == upgrade.Actor && st.Phase == domain.UpgradeSucceeded && last != domain.UpgradeSucceeded
				last = st.Phase
				return turned
			})
			if err != nil || succeeded == 0 {
				return 0, err
			}
			return max(succeeded, f.upgrades.calls()), nil
		},
	})
}
