package apply

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// A run's writes of the tenant's status change only the parts the worker
// owns (or still writes until they move: domain.StatusWritesToMove), from a
// status health wrote.
func TestRunWritesOnlyTheWorkersTenantParts(t *testing.T) {
	require.Equal(t, domain.ActorApplyWorker, WorkerActor)
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ref := domain.TenantRef("acme")
	observed := domain.TenantStatus{Phase: "Degraded", Machines: domain.MachineCounts{Total: 2, Ready: 1, Workers: 2},
		Conditions: []domain.Condition{{Type: domain.ConditionHealthy, Status: "False", Reason: "Degraded", LastTransitionTime: now.Add(-time.Hour)}}}
	drift := domain.DriftStatus{Add: 1, Summary: "1 to add"}
	for name, write := range map[string]func(*domain.TenantStatus){
		"running":    func(s *domain.TenantStatus) { tenantRunning(s, false, "apply-1", 2, now) },
		"destroying": func(s *domain.TenantStatus) { tenantRunning(s, true, "apply-1", 2, now) },
		"succeeded": func(s *domain.TenantStatus) {
			tenantAfterRun(s, endSucceeded, false, "apply-1", 2, "10.0.0.1", "", now)
			kubernetesVersionAfterRun(s, endSucceeded, false, "v1.34.1")
			driftAfterApply(s, "apply-1", domain.DriftSchedule{Every: time.Hour, Action: domain.DriftReport}, now)
			s.Machines = domain.MachineCounts{Total: 3, Ready: 3, Workers: 3}
		},
		"failed":   func(s *domain.TenantStatus) { tenantAfterRun(s, endFailed, false, "apply-1", 2, "", "boom", now) },
		"canceled": func(s *domain.TenantStatus) { tenantAfterRun(s, endCanceled, false, "apply-1", 2, "", "", now) },
		"drift": func(s *domain.TenantStatus) {
			s.Drift = &drift
			setCondition(s, domain.DriftCondition(&drift), now)
		},
		"bootstrapped": func(s *domain.TenantStatus) {
			setCondition(s, domain.Condition{Type: BootstrappedCondition, Status: "True", Reason: "EtcdBootstrapped"}, now)
		},
	} {
		next := observed
		next.Conditions = append([]domain.Condition(nil), observed.Conditions...)
		write(&next)
		before, _ := json.Marshal(observed)
		after, _ := json.Marshal(next)
		require.NoError(t, domain.CheckStatusWrite(ref, WorkerActor, before, after), name)
	}
}
