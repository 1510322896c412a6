package health_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/talos/health"
)

// oneRound is the Talos calls of one probe of 3 control planes and 2
// workers: the Version resource (a COSI Get) and the Service resources (a
// COSI List) and the ExtensionStatus resources (a COSI List) of each, and each control plane's own etcd.Member (a Get) and
// the etcd members. A healthy cluster needs no ServiceList.
var oneRound = map[string]int{"State/Get": 8, "State/List": 10, "MachineService/EtcdMemberList": 3}

func TestHealthReadyCluster(t *testing.T) {
	h := newHealthEnv(t, 3, 2, nil)
	got, err := h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)

	assert.Equal(t, domain.TenantHealthKind, got.Kind)
	assert.Equal(t, domain.APIVersion, got.APIVersion)
	assert.Equal(t, domain.HealthReady, got.State, "reasons: %v", got.Reasons)
	assert.Empty(t, got.Reasons)
	assert.False(t, got.Cached)
	assert.Equal(t, h.clock.Now().UTC(), got.ObservedAt)
	var names []string
	for _, m := range got.Machines {
		names = append(names, m.Name)
		assert.True(t, m.Reachable, m.Name)
		assert.True(t, m.Ready, m.Name)
		assert.Equal(t, "v1.13.0", m.TalosVersion, m.Name)
		assert.Equal(t, "Running", m.Stage, m.Name)
		for _, s := range m.Services {
			assert.True(t, s.Healthy, "%s on %s", s.ID, m.Name)
		}
		if m.Role == domain.RoleControlPlane {
			assert.Equal(t, domain.EtcdMemberHealthy, m.Etcd, m.Name)
			assert.Len(t, m.Services, 3, "apid, etcd, kubelet")
		} else {
			assert.Empty(t, m.Etcd, m.Name)
			assert.Len(t, m.Services, 2, "apid, kubelet")
		}
	}
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3", "w-1", "w-2"}, names, "control planes first, then workers")
	assert.Equal(t, "cp-1", got.Etcd.ReportedBy)
	assert.Len(t, got.Etcd.Members, 3)
	assert.Equal(t, 3, got.Etcd.Healthy)
	assert.True(t, got.Etcd.Quorum)
	assert.Equal(t, oneRound, h.calls.snapshot())

	// The observations are written back.
	m := h.machine("w-1")
	assert.Equal(t, "Running", m.Status.Stage)
	assert.True(t, m.Status.Ready)
	assert.Equal(t, "v1.13.0", m.Status.TalosVersion)
	require.NotNil(t, m.Status.LastSeen)
	assert.Equal(t, h.clock.Now().UTC().Truncate(time.Second), *m.Status.LastSeen)
	require.Len(t, m.Status.Conditions, 1)
	assert.Equal(t, health.ConditionHealthy, m.Status.Conditions[0].Type)
	assert.Equal(t, "True", m.Status.Conditions[0].Status)
	tn := h.tenantObj()
	assert.Equal(t, "Ready", tn.Status.Phase)
	assert.Equal(t, domain.MachineCounts{Total: 5, Ready: 5, ControlPlane: 3, Workers: 2}, tn.Status.Machines)
	cond := condition(tn.Status.Conditions, health.ConditionHealthy)
	require.NotNil(t, cond)
	assert.Equal(t, "True", cond.Status)
	assert.Equal(t, "all 5 machines are healthy", cond.Message)
}

func TestHealthDegradedWhenEtcdIsUnhealthy(t *testing.T) {
	h := newHealthEnv(t, 3, 2, nil)
	_, err := h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)

	h.fault("cp-2", emulator.Faults{Unhealthy: true})
	got, err := h.svc.Probe(h.ctx, h.tenant, true)
	require.NoError(t, err)
	assert.Equal(t, domain.HealthDegraded, got.State)
	assert.Contains(t, got.Reasons, "etcd on cp-2 is unhealthy: emulated fault: unhealthy")
	assert.Equal(t, 2, got.Etcd.Healthy)
	assert.True(t, got.Etcd.Quorum, "2 of 3 members keep quorum")
	cp2 := got.Machines[1]
	assert.Equal(t, "cp-2", cp2.Name)
	assert.True(t, cp2.Reachable)
	assert.False(t, cp2.Ready)
	assert.Equal(t, domain.EtcdMemberUnhealthy, cp2.Etcd)

	tn := h.tenantObj()
	assert.Equal(t, "Degraded", tn.Status.Phase)
	assert.Equal(t, 4, tn.Status.Machines.Ready)
	cond := condition(tn.Status.Conditions, health.ConditionHealthy)
	require.NotNil(t, cond)
	assert.Equal(t, "False", cond.Status)
	assert.Equal(t, domain.HealthDegraded, cond.Reason)
	assert.Contains(t, cond.Message, "etcd on cp-2 is unhealthy")
	m := h.machine("cp-2")
	assert.False(t, m.Status.Ready)
	assert.Equal(t, "ServicesUnhealthy", m.Status.Conditions[0].Reason)

	// A second unhealthy member loses quorum.
	h.fault("cp-3", emulator.Faults{Unhealthy: true})
	got, err = h.svc.Probe(h.ctx, h.tenant, true)
	require.NoError(t, err)
	assert.Equal(t, domain.HealthDegraded, got.State)
	assert.False(t, got.Etcd.Quorum)
	assert.Equal(t, "etcd has lost quorum: 1 of 3 members healthy", got.Reasons[0], "the cluster-level reason comes first")

	// Healed, the tenant is Ready again.
	h.fault("cp-2", emulator.Faults{})
	h.fault("cp-3", emulator.Faults{})
	got, err = h.svc.Probe(h.ctx, h.tenant, true)
	require.NoError(t, err)
	assert.Equal(t, domain.HealthReady, got.State, "reasons: %v", got.Reasons)
	tn = h.tenantObj()
	assert.Equal(t, "Ready", tn.Status.Phase)
	assert.Equal(t, 5, tn.Status.Machines.Ready)
	assert.Equal(t, "True", condition(tn.Status.Conditions, health.ConditionHealthy).Status)
}

func TestHealthDegradedWhenANodeIsAway(t *testing.T) {
	const timeout = 3 * time.Second
	for _, tc := range []struct {
		name   string
		node   string
		fault  emulator.Faults
		reason string
	}{
		{"unreachable worker", "w-2", emulator.Faults{Unreachable: true}, "w-2 unreachable: "},
		{"hung worker", "w-2", emulator.Faults{Hang: true}, "w-2 unreachable: no answer within 3s"},
		{"hung control plane", "cp-3", emulator.Faults{Hang: true}, "cp-3 unreachable: no answer within 3s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHealthEnv(t, 3, 2, func(c *health.Config) { c.Timeout = timeout })
			_, err := h.svc.Probe(h.ctx, h.tenant, false)
			require.NoError(t, err)
			h.fault(tc.node, tc.fault)

			start := time.Now()
			got, err := h.svc.Probe(h.ctx, h.tenant, true)
			took := time.Since(start)
			require.NoError(t, err)
			t.Logf("answered in %s: %q", took, got.Reasons)
			assert.Equal(t, domain.HealthDegraded, got.State)
			require.NotEmpty(t, got.Reasons)
			found := false
			for _, r := range got.Reasons {
				found = found || strings.HasPrefix(r, tc.reason)
			}
			assert.True(t, found, "no reason starting %q in %q", tc.reason, got.Reasons)
			var away domain.MachineHealth
			for _, m := range got.Machines {
				if m.Name == tc.node {
					away = m
				}
			}
			assert.False(t, away.Reachable)
			assert.NotEmpty(t, away.Error)
			if away.Role == domain.RoleControlPlane {
				assert.Equal(t, domain.EtcdMemberUnhealthy, away.Etcd)
				assert.Equal(t, 2, got.Etcd.Healthy)
				assert.True(t, got.Etcd.Quorum)
			}

			m := h.machine(tc.node)
			assert.False(t, m.Status.Ready)
			assert.Equal(t, "Running", m.Status.Stage, "a machine away keeps the stage it was last seen in")
			assert.Equal(t, "v1.13.0", m.Status.TalosVersion)
			assert.Equal(t, "Unreachable", m.Status.Conditions[0].Reason)
			assert.Equal(t, "Degraded", h.tenantObj().Status.Phase)
		})
	}
}

func TestHealthUnreachableWhenNoMachineAnswers(t *testing.T) {
	h := newHealthEnv(t, 1, 1, func(c *health.Config) { c.Timeout = 500 * time.Millisecond })
	h.fault("cp-1", emulator.Faults{Unreachable: true})
	h.fault("w-1", emulator.Faults{Hang: true})
	got, err := h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)
	assert.Equal(t, domain.HealthUnreachable, got.State)
	assert.Len(t, got.Reasons, 2)
	assert.Equal(t, "Degraded", h.tenantObj().Status.Phase)
	assert.Equal(t, domain.HealthUnreachable, condition(h.tenantObj().Status.Conditions, health.ConditionHealthy).Reason)
}

func TestHealthCacheAndRefresh(t *testing.T) {
	h := newHealthEnv(t, 3, 2, nil)
	first, err := h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)
	require.Equal(t, 21, h.calls.total())

	again, err := h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)
	assert.True(t, again.Cached)
	assert.Equal(t, first.ObservedAt, again.ObservedAt)
	assert.Equal(t, 21, h.calls.total(), "a cached answer calls nothing")

	h.clock.Advance(14 * time.Second)
	again, err = h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)
	assert.True(t, again.Cached)
	assert.Equal(t, 21, h.calls.total())

	h.clock.Advance(time.Second)
	again, err = h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)
	assert.False(t, again.Cached, "15 s on, the answer is probed again")
	assert.Equal(t, h.clock.Now().UTC(), again.ObservedAt)
	assert.Equal(t, 42, h.calls.total())

	fresh, err := h.svc.Probe(h.ctx, h.tenant, true)
	require.NoError(t, err)
	assert.False(t, fresh.Cached)
	assert.Equal(t, 63, h.calls.total(), "refresh bypasses the cache")
}

func TestHealthConcurrentProbesShareOne(t *testing.T) {
	h := newHealthEnv(t, 3, 2, nil)
	var wg sync.WaitGroup
	results := make([]domain.TenantHealth, 20)
	start := make(chan struct{})
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := h.svc.Probe(h.ctx, h.tenant, false)
			assert.NoError(t, err)
			results[i] = r
		}()
	}
	close(start)
	wg.Wait()
	assert.Equal(t, oneRound, h.calls.snapshot(), "20 concurrent requests make one round of Talos calls")
	for _, r := range results {
		assert.Equal(t, domain.HealthReady, r.State)
		assert.Equal(t, results[0].ObservedAt, r.ObservedAt)
	}
}

func TestHealthWaitersContextIsRespected(t *testing.T) {
	const timeout = 3 * time.Second
	h := newHealthEnv(t, 3, 2, func(c *health.Config) { c.Timeout = timeout })
	h.fault("w-2", emulator.Faults{Hang: true})

	ctx, cancel := context.WithTimeout(h.ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := h.svc.Probe(ctx, h.tenant, false)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), timeout/2, "an impatient caller leaves without waiting for the probe")

	// The probe it started goes on for the others: a caller now joins it.
	got, err := h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)
	assert.Equal(t, domain.HealthDegraded, got.State)
	assert.Equal(t, map[string]int{"State/Get": 8, "State/List": 8, "MachineService/EtcdMemberList": 3}, h.calls.snapshot(),
		"one round: the hung worker answers nothing past its Version resource")
}

func TestHealthWritesBackOnlyWhatChanged(t *testing.T) {
	h := newHealthEnv(t, 3, 2, nil)
	before := h.machine("cp-1")
	seq := h.lastSeq()
	_, err := h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)
	h.sync()
	assert.Equal(t, seq+6, h.lastSeq(), "five machines and the tenant")
	for s := seq + 1; s <= h.lastSeq(); s++ {
		rec, err := h.store.Get(h.ctx, s)
		require.NoError(t, err)
		assert.Equal(t, health.Actor, rec.Event.Actor)
		assert.True(t, strings.HasSuffix(rec.Event.Type, "StatusUpdated"), rec.Event.Type)
	}
	after := h.machine("cp-1")
	assert.Equal(t, before.Spec, after.Spec, "spec is never touched")
	assert.Equal(t, before.Metadata.Generation, after.Metadata.Generation)

	// Nothing changed: nothing is written, within the lastSeen interval.
	seq = h.lastSeq()
	_, err = h.svc.Probe(h.ctx, h.tenant, true)
	require.NoError(t, err)
	h.clock.Advance(30 * time.Second)
	_, err = h.svc.Probe(h.ctx, h.tenant, true)
	require.NoError(t, err)
	h.sync()
	assert.Equal(t, seq, h.lastSeq(), "a probe that sees nothing new writes nothing")

	// A minute after they were last written, lastSeen moves once per machine.
	h.clock.Advance(31 * time.Second)
	_, err = h.svc.Probe(h.ctx, h.tenant, true)
	require.NoError(t, err)
	h.sync()
	assert.Equal(t, seq+5, h.lastSeq(), "lastSeen of the five machines, the tenant unchanged")
	assert.Equal(t, h.clock.Now().UTC().Truncate(time.Second), *h.machine("w-2").Status.LastSeen)
	seq = h.lastSeq()
	_, err = h.svc.Probe(h.ctx, h.tenant, true)
	require.NoError(t, err)
	h.sync()
	assert.Equal(t, seq, h.lastSeq())
}

func TestHealthUnknownTenant(t *testing.T) {
	h := newHealthEnv(t, 1, 0, nil)
	_, err := h.svc.Probe(h.ctx, "nope", false)
	require.True(t, domain.IsNotFound(err), "%v", err)
}

func condition(conds []domain.Condition, typ string) *domain.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func TestHealthWritesNodeGroupReplicas(t *testing.T) {
	h := newHealthEnv(t, 3, 2, nil)
	for _, g := range []struct {
		name, role string
		count      int
	}{{"cp", domain.RoleControlPlane, 3}, {"workers", domain.RoleWorker, 2}, {"empty", domain.RoleWorker, 0}} {
		spec, err := json.Marshal(domain.NodeGroupSpec{Role: g.role, Count: g.count, Provider: "emu"})
		require.NoError(t, err)
		h.execute(domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: h.tenant, Name: g.name},
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: g.name, Tenant: h.tenant}, Spec: spec}})
	}
	group := func(name string) domain.NodeGroupStatus {
		return getAs[domain.NodeGroup](t, h.cache, domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: h.tenant, Name: name}).Status
	}

	_, err := h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)
	h.sync()
	assert.Equal(t, 3, group("cp").Replicas)
	assert.Equal(t, 3, group("cp").ReadyReplicas)
	assert.Equal(t, 2, group("workers").Replicas)
	assert.Equal(t, 2, group("workers").ReadyReplicas)
	assert.Equal(t, domain.NodeGroupStatus{}, group("empty"), "no machines, nothing to write")

	// A worker away: only its group changes.
	h.fault("w-2", emulator.Faults{Unreachable: true})
	seq := h.lastSeq()
	_, err = h.svc.Probe(h.ctx, h.tenant, true)
	require.NoError(t, err)
	h.sync()
	assert.Equal(t, 2, group("workers").Replicas)
	assert.Equal(t, 1, group("workers").ReadyReplicas)
	assert.Equal(t, 3, group("cp").ReadyReplicas)
	var groupWrites int
	for s := seq + 1; s <= h.lastSeq(); s++ {
		rec, err := h.store.Get(h.ctx, s)
		require.NoError(t, err)
		if rec.Event.Type == "NodeGroupStatusUpdated" {
			groupWrites++
		}
	}
	assert.Equal(t, 1, groupWrites, "the workers group only")
}

// TestHealthGoesByTheNodesResources: whatever the Version and ServiceList
// calls answer (here: a newer version, every service healthy), the probe
// goes by the node's runtime.Version and v1alpha1.Service resources: an
// unhealthy etcd is reported and the version is the node's.
func TestHealthGoesByTheNodesResources(t *testing.T) {
	lie := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		switch r := reply.(type) {
		case *machine.VersionResponse:
			for _, m := range r.GetMessages() {
				m.Version.Tag = "v9.9.9"
			}
		case *machine.ServiceListResponse:
			for _, m := range r.GetMessages() {
				for _, s := range m.GetServices() {
					s.State, s.Health = "Running", &machine.ServiceHealth{Healthy: true}
				}
			}
		}
		return nil
	})
	h := newHealthEnv(t, 3, 1, func(c *health.Config) { c.DialOptions = append(c.DialOptions, lie) })
	h.fault("cp-2", emulator.Faults{Unhealthy: true})
	got, err := h.svc.Probe(h.ctx, h.tenant, false)
	require.NoError(t, err)
	assert.Equal(t, domain.HealthDegraded, got.State)
	assert.Contains(t, got.Reasons, "etcd on cp-2 is unhealthy")
	for _, m := range got.Machines {
		assert.Equal(t, "v1.13.0", m.TalosVersion, m.Name)
		assert.Equal(t, m.Name != "cp-2", m.Ready, m.Name)
	}
	assert.Equal(t, domain.EtcdMemberUnhealthy, got.Machines[1].Etcd)
	assert.Equal(t, "v1.13.0", h.machine("w-1").Status.TalosVersion)
}
