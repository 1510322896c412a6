package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// sampleHealth is a degraded 2+2 tenant: one control plane's etcd unhealthy,
// one worker unreachable, one worker's Node NotReady, probed 4 s before the
// test CLI's clock.
func sampleHealth() domain.TenantHealth {
	healthy := func(ids ...string) []domain.ServiceHealth {
		var out []domain.ServiceHealth
		for _, id := range ids {
			out = append(out, domain.ServiceHealth{ID: id, State: "Running", Healthy: true})
		}
		return out
	}
	return domain.TenantHealth{APIVersion: domain.APIVersion, Kind: domain.TenantHealthKind, Tenant: "acme",
		State: domain.HealthDegraded,
		Reasons: []string{"etcd has lost quorum: 1 of 2 members healthy", "etcd on cp-2 is unhealthy: no leader",
			"node w-1 of w-1 is NotReady: Kubelet stopped posting node status.", "w-2 unreachable: no answer within 3s"},
		ObservedAt: time.Date(2026, 5, 1, 11, 59, 56, 0, time.UTC), Duration: "3.012s", Cached: true,
		Etcd: domain.EtcdHealth{ReportedBy: "cp-1", Healthy: 1, Members: []domain.EtcdMemberHealth{
			{Name: "cp-1", Machine: "cp-1", Healthy: true}, {Name: "cp-2", Machine: "cp-2"}}},
		Kubernetes: &domain.KubernetesHealth{Ready: true, Version: "v1.35.4"},
		Machines: []domain.MachineHealth{
			{Name: "cp-1", Role: domain.RoleControlPlane, Address: "10.0.0.11", Reachable: true, TalosVersion: "v1.13.0",
				Stage: "Running", Ready: true, Services: healthy("apid", "etcd", "kubelet"), Etcd: domain.EtcdMemberHealthy,
				Node: domain.NodeReady, KubeletVersion: "v1.35.4"},
			{Name: "cp-2", Role: domain.RoleControlPlane, Address: "10.0.0.12", Reachable: true, TalosVersion: "v1.13.0",
				Stage: "Running", Etcd: domain.EtcdMemberUnhealthy, Reasons: []string{"etcd on cp-2 is unhealthy: no leader"},
				Services: []domain.ServiceHealth{{ID: "apid", State: "Running", Healthy: true}, {ID: "etcd", State: "Running", Message: "no leader"},
					{ID: "kubelet", State: "Starting"}}, Node: domain.NodeReady, KubeletVersion: "v1.35.4"},
			{Name: "w-1", Role: domain.RoleWorker, Address: "10.0.0.21", Reachable: true, TalosVersion: "v1.13.0",
				Stage: "Running", Services: healthy("apid", "kubelet"), Node: domain.NodeNotReady, KubeletVersion: "v1.35.4",
				Reasons: []string{"node w-1 of w-1 is NotReady: Kubelet stopped posting node status."}},
			{Name: "w-2", Role: domain.RoleWorker, Address: "10.0.0.22", Error: "no answer within 3s", Node: domain.NodeUnknown,
				Reasons: []string{"w-2 unreachable: no answer within 3s"}},
		}}
}

func TestHealthCommand(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.handle("GET /api/v1/tenants/acme/health", func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sampleHealth())
	})
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	for _, format := range []string{outTable, outJSON, outYAML} {
		t.Run(format, func(t *testing.T) {
			golden(t, "health."+format, tc.with(t).ok("health", "acme", "-o", format))
		})
	}
	tc.ok("health", "--refresh") // the context's tenant
	assert.Equal(t, []string{"", "", "", "refresh=true"}, f.queriesOf("GET /api/v1/tenants/acme/health"))

	r := tc.run("health", "nope")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "NotFound")
	r = tc.run("health", "acme", "-o", "wide")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "unknown output format")
}

func TestPrintHealthWithoutMachines(t *testing.T) {
	var b syncBuffer
	h := domain.TenantHealth{Tenant: "empty", State: domain.HealthUnreachable, Reasons: []string{"the tenant has no machines"},
		ObservedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), Duration: "0s"}
	require.NoError(t, printHealth(&b, h, h.ObservedAt.Add(time.Second)))
	assert.Equal(t, "empty: Unreachable, 0/0 machines ready, probed 1s ago in 0s\n  the tenant has no machines\n", b.String())
}
