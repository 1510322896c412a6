package health

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func mkMachine(name, role, addr string) domain.Machine {
	return domain.Machine{Metadata: domain.ObjectMeta{Name: name, Tenant: "acme"}, Spec: domain.MachineSpec{NodeGroup: "ng", Role: role, Address: addr}}
}

func healthyServices(role string) map[string]domain.ServiceHealth {
	out := map[string]domain.ServiceHealth{}
	for _, id := range checkedServices(role) {
		out[id] = domain.ServiceHealth{ID: id, State: "Running", Healthy: true}
	}
	return out
}

// up is a control plane or worker that answered with healthy services; a
// control plane reports members.
func up(name, role, addr string, members ...etcdMember) observation {
	return observation{Machine: mkMachine(name, role, addr), Version: "v1.13.0", Services: healthyServices(role), Members: members}
}

func members(names ...string) []etcdMember {
	var out []etcdMember
	for _, n := range names {
		out = append(out, etcdMember{Name: n})
	}
	return out
}

func withService(o observation, id string, s domain.ServiceHealth) observation {
	svcs := map[string]domain.ServiceHealth{}
	for k, v := range o.Services {
		svcs[k] = v
	}
	s.ID = id
	svcs[id] = s
	o.Services = svcs
	return o
}

func TestAssess(t *testing.T) {
	cps := members("cp-1", "cp-2", "cp-3")
	down := func(name, role, err string) observation {
		return observation{Machine: mkMachine(name, role, "10.0.0.9"), Err: err}
	}
	tests := []struct {
		name    string
		obs     []observation
		state   string
		reasons []string
		healthy int
		quorum  bool
	}{
		{name: "no machines", state: domain.HealthUnreachable, reasons: []string{"the tenant has no machines"}},
		{name: "healthy", state: domain.HealthReady, healthy: 3, quorum: true, obs: []observation{
			up("w-1", domain.RoleWorker, "10.0.0.21"),
			up("cp-2", domain.RoleControlPlane, "10.0.0.12", cps...),
			up("cp-1", domain.RoleControlPlane, "10.0.0.11", cps...),
			up("cp-3", domain.RoleControlPlane, "10.0.0.13", cps...),
		}},
		{name: "etcd unhealthy on one", state: domain.HealthDegraded, healthy: 2, quorum: true, obs: []observation{
			up("cp-1", domain.RoleControlPlane, "10.0.0.11", cps...),
			withService(up("cp-2", domain.RoleControlPlane, "10.0.0.12", cps...), "etcd", domain.ServiceHealth{State: "Running", Message: "no leader"}),
			up("cp-3", domain.RoleControlPlane, "10.0.0.13", cps...),
		}, reasons: []string{"etcd on cp-2 is unhealthy: no leader"}},
		{name: "quorum lost", state: domain.HealthDegraded, healthy: 1, obs: []observation{
			up("cp-1", domain.RoleControlPlane, "10.0.0.11", cps...),
			down("cp-2", domain.RoleControlPlane, "no answer within 3s"),
			down("cp-3", domain.RoleControlPlane, "connection refused"),
		}, reasons: []string{"etcd has lost quorum: 1 of 3 members healthy", "cp-2 unreachable: no answer within 3s", "cp-3 unreachable: connection refused"}},
		{name: "worker away", state: domain.HealthDegraded, healthy: 1, quorum: true, obs: []observation{
			up("cp-1", domain.RoleControlPlane, "10.0.0.11", members("cp-1")...),
			down("w-2", domain.RoleWorker, "connection refused"),
		}, reasons: []string{"w-2 unreachable: connection refused"}},
		{name: "nothing answers", state: domain.HealthUnreachable, obs: []observation{
			down("cp-1", domain.RoleControlPlane, "connection refused"),
			down("w-1", domain.RoleWorker, "no answer within 3s"),
		}, reasons: []string{"cp-1 unreachable: connection refused", "w-1 unreachable: no answer within 3s"}},
		{name: "booting worker", state: domain.HealthDegraded, healthy: 1, quorum: true, obs: []observation{
			up("cp-1", domain.RoleControlPlane, "10.0.0.11", members("cp-1")...),
			withService(up("w-1", domain.RoleWorker, "10.0.0.21"), "kubelet", domain.ServiceHealth{State: "Starting", Message: "starting"}),
		}, reasons: []string{"kubelet on w-1 is starting: starting"}},
		{name: "not bootstrapped", state: domain.HealthDegraded, obs: []observation{
			withService(observation{Machine: mkMachine("cp-1", domain.RoleControlPlane, "10.0.0.11"), Version: "v1.13.0",
				Services: healthyServices(domain.RoleControlPlane), MembersErr: "etcd is not bootstrapped"},
				"etcd", domain.ServiceHealth{State: "Preparing", Message: "waiting for bootstrap"}),
		}, reasons: []string{"etcd membership unknown: cp-1: etcd is not bootstrapped", "etcd on cp-1 is preparing: waiting for bootstrap"}},
		{name: "member by peer url, stranger member, missing member", state: domain.HealthDegraded, healthy: 1, obs: []observation{
			up("cp-1", domain.RoleControlPlane, "10.0.0.11",
				etcdMember{Name: "talos-abc", PeerURLs: []string{"https://10.0.0.11:2380"}}, etcdMember{Name: "old-node"}),
			up("cp-2", domain.RoleControlPlane, "10.0.0.12"),
		}, reasons: []string{"etcd has lost quorum: 1 of 2 members healthy", "etcd member old-node is not a machine of this tenant", "cp-2 is not an etcd member"}},
		{name: "learner does not vote", state: domain.HealthReady, healthy: 1, quorum: true, obs: []observation{
			up("cp-1", domain.RoleControlPlane, "10.0.0.11", etcdMember{Name: "cp-1"}, etcdMember{Name: "cp-2", Learner: true}),
			up("cp-2", domain.RoleControlPlane, "10.0.0.12"),
		}},
		{name: "workers only", state: domain.HealthDegraded, obs: []observation{
			up("w-1", domain.RoleWorker, "10.0.0.21"),
		}, reasons: []string{"the tenant has no control-plane machines"}},
		{name: "service missing", state: domain.HealthDegraded, healthy: 1, quorum: true, obs: []observation{
			up("cp-1", domain.RoleControlPlane, "10.0.0.11", members("cp-1")...),
			{Machine: mkMachine("w-1", domain.RoleWorker, "10.0.0.21"), Version: "v1.13.0", Services: map[string]domain.ServiceHealth{
				"apid": {ID: "apid", State: "Running", Healthy: true}}},
		}, reasons: []string{"kubelet on w-1 is not running"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			h := assess("acme", tc.obs, kubeObservation{}, start, 42*time.Millisecond)
			assert.Equal(t, tc.state, h.State)
			assert.Equal(t, tc.reasons, h.Reasons)
			assert.Equal(t, tc.healthy, h.Etcd.Healthy)
			assert.Equal(t, tc.quorum, h.Etcd.Quorum)
			assert.Equal(t, "42ms", h.Duration)
			assert.Equal(t, start, h.ObservedAt)
			assert.Len(t, h.Machines, len(tc.obs))
		})
	}
}

func TestAssessMachineDetails(t *testing.T) {
	h := assess("acme", []observation{
		up("w-1", domain.RoleWorker, "10.0.0.21"),
		up("cp-1", domain.RoleControlPlane, "10.0.0.11", etcdMember{Name: "cp-1"}),
		withService(up("w-0", domain.RoleWorker, "10.0.0.20"), "kubelet", domain.ServiceHealth{State: "Starting"}),
		{Machine: mkMachine("cp-2", domain.RoleControlPlane, "10.0.0.12"), Err: "no answer within 3s"},
	}, kubeObservation{}, time.Now(), 0)
	var names []string
	for _, m := range h.Machines {
		names = append(names, m.Name)
	}
	assert.Equal(t, []string{"cp-1", "cp-2", "w-0", "w-1"}, names)
	cp1, cp2, w0, w1 := h.Machines[0], h.Machines[1], h.Machines[2], h.Machines[3]
	assert.Equal(t, domain.EtcdMemberHealthy, cp1.Etcd)
	assert.Equal(t, domain.EtcdNotMember, cp2.Etcd)
	assert.False(t, cp2.Reachable)
	assert.Equal(t, "no answer within 3s", cp2.Error)
	assert.Empty(t, cp2.Stage)
	assert.Equal(t, "Booting", w0.Stage)
	assert.False(t, w0.Ready)
	assert.Equal(t, "Running", w1.Stage)
	assert.True(t, w1.Ready)
	assert.Equal(t, []domain.ServiceHealth{{ID: "apid", State: "Running", Healthy: true}, {ID: "kubelet", State: "Running", Healthy: true}}, w1.Services)
}

func TestAssessKubernetes(t *testing.T) {
	machines := []observation{
		up("cp-1", domain.RoleControlPlane, "10.0.0.11", members("cp-1")...),
		up("w-1", domain.RoleWorker, "10.0.0.21"),
	}
	ready := nodeObservation{Ready: true, Kubelet: "v1.35.4"}
	for _, tc := range []struct {
		name     string
		kube     kubeObservation
		state    string
		reasons  []string
		nodes    []string // of cp-1, w-1
		ready    []bool
		kubeInfo *domain.KubernetesHealth
	}{
		{name: "not checked: Talos alone", kube: kubeObservation{}, state: domain.HealthReady, nodes: []string{"", ""}, ready: []bool{true, true}},
		{name: "every Node Ready", kube: kubeObservation{Checked: true, Ready: true, Version: "v1.35.4",
			Nodes: map[string]nodeObservation{"cp-1": ready, "w-1": ready}},
			state: domain.HealthReady, nodes: []string{"Ready", "Ready"}, ready: []bool{true, true},
			kubeInfo: &domain.KubernetesHealth{Ready: true, Version: "v1.35.4"}},
		{name: "a Node NotReady with the kubelet's message", kube: kubeObservation{Checked: true, Ready: true, Version: "v1.35.4",
			Nodes: map[string]nodeObservation{"cp-1": ready, "w-1": {Message: "Kubelet stopped posting node status."}}},
			state: domain.HealthDegraded, reasons: []string{"node w-1 of w-1 is NotReady: Kubelet stopped posting node status."},
			nodes: []string{"Ready", "NotReady"}, ready: []bool{true, false},
			kubeInfo: &domain.KubernetesHealth{Ready: true, Version: "v1.35.4"}},
		{name: "a machine without its Node", kube: kubeObservation{Checked: true, Ready: true,
			Nodes: map[string]nodeObservation{"cp-1": ready}},
			state: domain.HealthDegraded, reasons: []string{"w-1 has no Kubernetes Node w-1"},
			nodes: []string{"Ready", "Missing"}, ready: []bool{true, false},
			kubeInfo: &domain.KubernetesHealth{Ready: true}},
		{name: "API server unreachable: Nodes unknown, machines by Talos", kube: kubeObservation{Checked: true, Err: "connection refused"},
			state: domain.HealthDegraded, reasons: []string{"the Kubernetes API server: connection refused"},
			nodes: []string{"Unknown", "Unknown"}, ready: []bool{true, true},
			kubeInfo: &domain.KubernetesHealth{Error: "connection refused"}},
		{name: "API server not ready", kube: kubeObservation{Checked: true, NotReady: "[-]etcd failed", Version: "v1.35.4",
			Nodes: map[string]nodeObservation{"cp-1": ready, "w-1": ready}},
			state: domain.HealthDegraded, reasons: []string{"the Kubernetes API server: not ready: [-]etcd failed"},
			nodes: []string{"Ready", "Ready"}, ready: []bool{true, true},
			kubeInfo: &domain.KubernetesHealth{Version: "v1.35.4", Error: "not ready: [-]etcd failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := assess("acme", machines, tc.kube, time.Now(), 0)
			assert.Equal(t, tc.state, h.State)
			assert.Equal(t, tc.reasons, h.Reasons)
			assert.Equal(t, tc.kubeInfo, h.Kubernetes)
			require.Len(t, h.Machines, 2)
			for i, m := range h.Machines {
				assert.Equal(t, tc.nodes[i], m.Node, m.Name)
				assert.Equal(t, tc.ready[i], m.Ready, m.Name)
			}
		})
	}
}

func TestMachineStatusAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	earlier := now.Add(-30 * time.Second)
	longAgo := now.Add(-61 * time.Second)
	healthy := domain.MachineHealth{Name: "w-1", Role: domain.RoleWorker, Reachable: true, Ready: true, Stage: "Running", TalosVersion: "v1.13.0"}
	seen := func(ts time.Time) *time.Time { return &ts }
	okCond := func(at time.Time) []domain.Condition {
		return []domain.Condition{{Type: ConditionHealthy, Status: "True", Reason: "Healthy", Message: "every service checked is healthy", LastTransitionTime: at}}
	}
	steady := domain.MachineStatus{Stage: "Running", Ready: true, TalosVersion: "v1.13.0", ConfigUpToDate: true, LastSeen: seen(earlier),
		FirstHealthy: seen(longAgo), Conditions: okCond(longAgo)}
	tests := []struct {
		name     string
		cur      domain.MachineStatus
		mh       domain.MachineHealth
		changed  bool
		ready    bool
		stage    string
		version  string
		lastSeen *time.Time
		reason   string
	}{
		{name: "first sight", cur: domain.MachineStatus{Stage: "Unknown"}, mh: healthy, changed: true, ready: true, stage: "Running",
			version: "v1.13.0", lastSeen: seen(now), reason: "Healthy"},
		{name: "nothing new within the interval", cur: steady, mh: healthy, ready: true, stage: "Running", version: "v1.13.0",
			lastSeen: seen(earlier), reason: "Healthy"},
		{name: "nothing new after the interval", cur: func() domain.MachineStatus { s := steady; s.LastSeen = seen(longAgo); return s }(),
			mh: healthy, changed: true, ready: true, stage: "Running", version: "v1.13.0", lastSeen: seen(now), reason: "Healthy"},
		{name: "new version moves lastSeen too", cur: steady, mh: func() domain.MachineHealth { m := healthy; m.TalosVersion = "v1.13.1"; return m }(),
			changed: true, ready: true, stage: "Running", version: "v1.13.1", lastSeen: seen(now), reason: "Healthy"},
		{name: "unreachable keeps stage, version and lastSeen", cur: steady,
			mh:      domain.MachineHealth{Name: "w-1", Role: domain.RoleWorker, Error: "x", Reasons: []string{"w-1 unreachable: x"}},
			changed: true, stage: "Running", version: "v1.13.0", lastSeen: seen(earlier), reason: "Unreachable"},
		{name: "unhealthy", cur: steady,
			mh:      domain.MachineHealth{Name: "w-1", Role: domain.RoleWorker, Reachable: true, Stage: "Running", TalosVersion: "v1.13.0", Reasons: []string{"kubelet on w-1 is unhealthy"}},
			changed: true, stage: "Running", version: "v1.13.0", lastSeen: seen(now), reason: "ServicesUnhealthy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, changed := machineStatusAfter(tc.cur, tc.mh, now, time.Minute)
			assert.Equal(t, tc.changed, changed)
			assert.Equal(t, tc.ready, next.Ready)
			assert.Equal(t, tc.stage, next.Stage)
			assert.Equal(t, tc.version, next.TalosVersion)
			assert.Equal(t, tc.lastSeen, next.LastSeen)
			assert.Equal(t, tc.cur.ConfigUpToDate, next.ConfigUpToDate, "not the probe's to say")
			assert.Len(t, next.Conditions, 1)
			assert.Equal(t, tc.reason, next.Conditions[0].Reason)
		})
	}
	// FirstHealthy is set once, by the first probe that finds the machine
	// healthy (remediation's startupTimeout runs until then), and kept.
	first, _ := machineStatusAfter(domain.MachineStatus{Stage: "Unknown"}, healthy, now, time.Minute)
	assert.Equal(t, seen(now), first.FirstHealthy)
	sick, _ := machineStatusAfter(domain.MachineStatus{Stage: "Unknown"}, domain.MachineHealth{Name: "w-1", Error: "x"}, now, time.Minute)
	assert.Nil(t, sick.FirstHealthy)
	later, _ := machineStatusAfter(first, healthy, now.Add(time.Hour), time.Minute)
	assert.Equal(t, seen(now), later.FirstHealthy)
	// Ready by Talos alone, its API server not answering: not yet; its Node
	// Ready: then.
	noAPI := healthy
	noAPI.Node = domain.NodeUnknown
	booting, _ := machineStatusAfter(domain.MachineStatus{Stage: "Unknown"}, noAPI, now, time.Minute)
	assert.True(t, booting.Ready)
	assert.Nil(t, booting.FirstHealthy, "healthy by Talos alone while the API server does not answer")
	withNode := healthy
	withNode.Node = domain.NodeReady
	joined, _ := machineStatusAfter(booting, withNode, now.Add(time.Minute), time.Minute)
	assert.Equal(t, seen(now.Add(time.Minute)), joined.FirstHealthy)
	// The condition's transition time moves only when its status does.
	next, _ := machineStatusAfter(steady, healthy, now, time.Minute)
	assert.Equal(t, longAgo, next.Conditions[0].LastTransitionTime)
	next, _ = machineStatusAfter(steady, domain.MachineHealth{Name: "w-1", Error: "x"}, now, time.Minute)
	assert.Equal(t, now, next.Conditions[0].LastTransitionTime)
	assert.Equal(t, longAgo, steady.Conditions[0].LastTransitionTime, "the current status is not modified")
}

func TestTenantStatusAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ready := domain.TenantHealth{State: domain.HealthReady, Machines: []domain.MachineHealth{
		{Name: "cp-1", Role: domain.RoleControlPlane, Ready: true}, {Name: "w-1", Role: domain.RoleWorker, Ready: true}}}
	degraded := domain.TenantHealth{State: domain.HealthDegraded, Reasons: []string{"w-1 unreachable: x"}, Machines: []domain.MachineHealth{
		{Name: "cp-1", Role: domain.RoleControlPlane, Ready: true}, {Name: "w-1", Role: domain.RoleWorker}}}
	reconciled := domain.Condition{Type: "Reconciled", Status: "True", Reason: "ApplySucceeded", LastTransitionTime: now.Add(-time.Hour)}
	tests := []struct {
		name      string
		phase     string
		h         domain.TenantHealth
		wantPhase string
		ready     int
		status    string
	}{
		{"ready stays ready", "Ready", ready, "Ready", 2, "True"},
		{"ready becomes degraded", "Ready", degraded, "Degraded", 1, "False"},
		{"degraded becomes ready", "Degraded", ready, "Ready", 2, "True"},
		{"provisioning is the apply worker's", "Provisioning", degraded, "Provisioning", 1, "False"},
		{"failed is the apply worker's", "Failed", ready, "Failed", 2, "True"},
		{"unreachable is degraded", "Ready", domain.TenantHealth{State: domain.HealthUnreachable, Reasons: []string{"x"}}, "Degraded", 0, "False"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cur := domain.TenantStatus{Phase: tc.phase, ObservedGeneration: 3, EndpointAddress: "10.0.0.5", Conditions: []domain.Condition{reconciled}}
			next, changed := tenantStatusAfter(cur, tc.h, now)
			assert.True(t, changed)
			assert.Equal(t, tc.wantPhase, next.Phase)
			assert.Equal(t, tc.ready, next.Machines.Ready)
			assert.Equal(t, len(tc.h.Machines), next.Machines.Total)
			assert.Equal(t, int64(3), next.ObservedGeneration)
			assert.Equal(t, "10.0.0.5", next.EndpointAddress)
			assert.Equal(t, reconciled, next.Conditions[0], "other conditions are kept")
			c := next.Conditions[1]
			assert.Equal(t, ConditionHealthy, c.Type)
			assert.Equal(t, tc.status, c.Status)
			assert.Equal(t, tc.h.State, c.Reason)
			again, changed := tenantStatusAfter(next, tc.h, now.Add(time.Minute))
			assert.False(t, changed, "the same health writes nothing")
			assert.Equal(t, next, again)
		})
	}
}
