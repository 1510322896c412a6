package configsync_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/configsync"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// gatedNodes are nodes that take every config in place, behind the kit's
// gate: a run waits there before the apply whose record the kit counts.
// No node is dialled: the conformance is the controller's, the Talos API's
// behaviour is the emulator tests'.
type gatedNodes struct{ gate *controllertest.Gate }

func (n gatedNodes) ApplyConfig(ctx context.Context, _ *secrets.Bundle, _ string, _ []byte, _ bool) (talos.ApplyResult, error) {
	if err := n.gate.Pass(ctx); err != nil {
		return talos.ApplyResult{}, err
	}
	return talos.ApplyResult{Mode: machine.ApplyConfigurationRequest_NO_REBOOT}, nil
}

func (gatedNodes) ApplyConfigDryRun(context.Context, *secrets.Bundle, string, []byte) (talos.ApplyResult, error) {
	return talos.ApplyResult{Mode: machine.ApplyConfigurationRequest_NO_REBOOT}, nil
}

func (gatedNodes) Ready(context.Context, *secrets.Bundle, string) (string, error) { return "", nil }

// TestConformance: a machine whose rendered config it does not hold yet is
// given it once (one MachineConfigApplied of the controller), whether the
// leader restarts or loses the lease mid-apply or the tenant's key is
// redelivered.
func TestConformance(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	controllertest.Conformance(t, controllertest.Subject[*eventstore.SealedSecrets]{
		Lease: configsync.Lease, Consumer: configsync.Consumer, Queue: configsync.Queue,
		// The replicas share the sealed secrets, as servers share the key
		// file: the tenant's bundle one made, the next one reads.
		Setup: func(e *controllertest.Env) *eventstore.SealedSecrets {
			plain, err := eventstore.OpenSecrets(e.Ctx, e.Store)
			require.NoError(e.T, err)
			sealed, err := eventstore.OpenSealedSecrets(e.Ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(e.T.TempDir(), "secrets.key")})
			require.NoError(e.T, err)
			return sealed
		},
		Replica: func(e *controllertest.Env, sealed *eventstore.SealedSecrets, holder string) controllertest.Replica {
			cache := projections.NewCache(e.Store, nil)
			controllertest.Start(e.T, e.Ctx, cache.Run)
			pki := talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: sealed, Log: quiet})
			// The controller debounces at its clock: the kit's, standing
			// still, would never make a key due. The wall clock makes the
			// kit's entries (queued at its earlier time) due at once.
			return configsync.New(configsync.Config{Store: e.Store, Cache: cache, Talos: talos.NewService(cache, pki),
				Holder: holder, Nodes: gatedNodes{e.Gate}, Log: quiet, Debounce: 10 * time.Millisecond,
				BackoffBase: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, Clock: controller.RealClock(nil)})
		},
		Work: func(e *controllertest.Env, _ *eventstore.SealedSecrets) string {
			create := func(kind *domain.KindInfo, tenant, name string, spec any) {
				e.T.Helper()
				raw, _ := json.Marshal(spec)
				_, err := e.Store.Execute(e.Ctx, domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(kind, tenant, name),
					Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: raw},
					Actor:  "test", Now: e.Clock.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{Retries: 5})
				require.NoError(e.T, err, "creating %s %s", kind.Kind, name)
			}
			create(domain.TenantKind, "", "acme", map[string]any{})
			create(domain.NodeGroupKind, "acme", "cp", domain.NodeGroupSpec{Role: domain.RoleControlPlane, Count: 1, Provider: "emu"})
			// The machine last: a tenant without machines is not queued.
			create(domain.MachineKind, "acme", "cp-1", domain.MachineSpec{NodeGroup: "cp", Role: domain.RoleControlPlane, Address: "10.0.0.1"})
			return "acme"
		},
		Effects: func(e *controllertest.Env, _ *eventstore.SealedSecrets, _ string) (int, error) {
			return controllertest.CountEvents(e.Ctx, e.Store, func(ev *domain.Event) bool {
				return ev.Actor == configsync.Actor && ev.Type == domain.EventMachineConfigApplied
			})
		},
	})
}
