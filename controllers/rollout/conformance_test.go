package rollout_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/controllers/rollout"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// gatedConfigs is a tenant whose one machine does not hold its config yet,
// answered behind the kit's gate: a run waits there before it starts the
// tenant.
type gatedConfigs struct{ gate *controllertest.Gate }

func (c gatedConfigs) ConfigProgress(ctx context.Context, _ string, _ time.Time) (talos.ConfigProgress, error) {
	if err := c.gate.Pass(ctx); err != nil {
		return talos.ConfigProgress{}, err
	}
	return talos.ConfigProgress{Machines: 1, Pending: []string{"m-1"}}, nil
}

// TestConformance: a config patch rolled onto a tenant whose machine does
// not hold it yet is written once (labelled with the rollout), whether the
// leader restarts or loses the lease mid-run or the rollout's key is
// redelivered.
func TestConformance(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	patch := domain.ConfigPatchSpec{Patch: "machine:\n  nodeLabels:\n    fleet: blue\n"}
	controllertest.Conformance(t, controllertest.Subject[struct{}]{
		Lease: rollout.Lease, Consumer: rollout.Consumer, Queue: rollout.Queue,
		Replica: func(e *controllertest.Env, _ struct{}, holder string) controllertest.Replica {
			cache := projections.NewCache(e.Store, nil)
			controllertest.Start(e.T, e.Ctx, cache.Run)
			return rollout.New(rollout.Config{Store: e.Store, Cache: cache, Prober: clockProber{e.Clock}, Configs: gatedConfigs{e.Gate},
				Holder: holder, Clock: e.Clock, Log: quiet})
		},
		Work: func(e *controllertest.Env, _ struct{}) string {
			create := func(kind *domain.KindInfo, tenant, name string, spec any) {
				e.T.Helper()
				raw, _ := json.Marshal(spec)
				_, err := e.Store.Execute(e.Ctx, domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(kind, tenant, name),
					Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: raw},
					Actor:  "test", Now: e.Clock.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{Retries: 5})
				if err != nil {
					e.T.Fatalf("creating %s %s: %v", kind.Kind, name, err)
				}
			}
			create(domain.TenantKind, "", "acme", map[string]any{})
			// Written by hand already; the rollout takes it over.
			create(domain.ConfigPatchKind, "acme", "labels", patch)
			create(domain.RolloutKind, "", "fleet", domain.RolloutSpec{Soak: "0s",
				Change: domain.RolloutChange{ConfigPatch: &domain.RolloutConfigPatch{Name: "labels", Spec: patch}}})
			return "fleet"
		},
		Effects: func(e *controllertest.Env, _ struct{}, _ string) (int, error) {
			return controllertest.CountEvents(e.Ctx, e.Store, func(ev *domain.Event) bool {
				return ev.Actor == rollout.Actor && ev.Object.Kind == domain.ConfigPatchKind.Kind
			})
		},
	})
}
