package remediation_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/controllers/remediation"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// gatedProber is quietProber behind the kit's gate: a run waits there
// before it decides anything.
type gatedProber struct{ gate *controllertest.Gate }

func (p gatedProber) Probe(ctx context.Context, tenant string, _ bool) (domain.TenantHealth, error) {
	if err := p.gate.Pass(ctx); err != nil {
		return domain.TenantHealth{}, err
	}
	return domain.TenantHealth{Tenant: tenant}, nil
}

// TestConformance: a tenant with a machine unhealthy for an hour gets one
// Remediation, whether its leader restarts or loses the lease mid-run or
// its key is redelivered.
func TestConformance(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	controllertest.Conformance(t, controllertest.Subject[struct{}]{
		Lease: remediation.Lease, Consumer: remediation.Consumer, Queue: remediation.Queue,
		Replica: func(e *controllertest.Env, _ struct{}, holder string) controllertest.Replica {
			// Each replica reads its own read model, as on its own server.
			cache := projections.NewCache(e.Store, nil)
			controllertest.Start(e.T, e.Ctx, cache.Run)
			return remediation.New(remediation.Config{Store: e.Store, Cache: cache, Prober: gatedProber{e.Gate},
				Holder: holder, Clock: e.Clock, Log: quiet})
		},
		Work: func(e *controllertest.Env, _ struct{}) string {
			now := e.Clock.Now()
			execute := func(op domain.Op, kind *domain.KindInfo, tenant, name string, spec, status any) {
				e.T.Helper()
				obj := &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}}
				if spec != nil {
					obj.Spec, _ = json.Marshal(spec)
				}
				if status != nil {
					obj.Status, _ = json.Marshal(status)
				}
				_, err := e.Store.Execute(e.Ctx, domain.Command{Op: op, Ref: domain.ObjectRef(kind, tenant, name), Object: obj,
					Actor: "test", Now: now, NewUID: uuid.NewString()}, eventstore.UpdateOptions{Retries: 5})
				if err != nil {
					e.T.Fatalf("%s %s %s: %v", op, kind.Kind, name, err)
				}
			}
			execute(domain.OpCreate, domain.TenantKind, "", "acme", map[string]any{}, nil)
			for _, m := range []string{"w-1", "w-2"} {
				execute(domain.OpCreate, domain.MachineKind, "acme", m, domain.MachineSpec{NodeGroup: "workers", Role: domain.RoleWorker, Address: "10.0.0.1"}, nil)
			}
			ever := now.Add(-2 * time.Hour)
			execute(domain.OpUpdateStatus, domain.MachineKind, "acme", "w-1", nil, domain.MachineStatus{FirstHealthy: &ever,
				Conditions: []domain.Condition{{Type: domain.ConditionHealthy, Status: "True", Reason: "Healthy", LastTransitionTime: ever}}})
			execute(domain.OpUpdateStatus, domain.MachineKind, "acme", "w-2", nil, domain.MachineStatus{FirstHealthy: &ever,
				Conditions: []domain.Condition{{Type: domain.ConditionHealthy, Status: "False", Reason: "Unreachable", LastTransitionTime: now.Add(-time.Hour)}}})
			// The group last: its event queues the tenant.
			execute(domain.OpCreate, domain.NodeGroupKind, "acme", "workers", domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 2, Provider: "emu",
				Remediation: &domain.RemediationPolicy{UnhealthyAfter: "5m"}}, nil)
			return "acme"
		},
		Effects: func(e *controllertest.Env, _ struct{}, _ string) (int, error) {
			return controllertest.CountEvents(e.Ctx, e.Store, func(ev *domain.Event) bool {
				return ev.Actor == remediation.Actor && ev.Action == domain.ActionCreated && ev.Object.Kind == domain.RemediationKind.Kind
			})
		},
	})
}
