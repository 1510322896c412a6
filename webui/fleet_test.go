package webui

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/rezuscloud/rezuscloud/domain"
)

func fleetTenant(name, phase, talos, kube, healthy string, total, ready int) domain.Tenant {
	t := domain.Tenant{Metadata: domain.ObjectMeta{Name: name}}
	t.Spec.TalosVersion = talos
	t.Status.Phase, t.Status.KubernetesVersion = phase, kube
	t.Status.Machines = domain.MachineCounts{Total: total, Ready: ready}
	if healthy != "" {
		t.Status.Conditions = []domain.Condition{{Type: domain.ConditionHealthy, Status: healthy}}
	}
	return t
}

func TestSummarizeFleet(t *testing.T) {
	ts := []domain.Tenant{
		fleetTenant("a", "Ready", "v1.13.1", "v1.36.1", "True", 3, 3),
		fleetTenant("b", "Ready", "v1.13.0", "v1.36.1", "False", 3, 2),
		fleetTenant("c", "Failed", "v1.13.1", "v1.36.1", "", 0, 0),
		fleetTenant("d", "Provisioning", "", "", "Unknown", 3, 0),
		fleetTenant("e", "Ready", "v1.13.1", "v1.35.4", "True", 3, 3),
	}
	running := domain.Rollout{Metadata: domain.ObjectMeta{Name: "r1"}, Status: domain.RolloutStatus{Phase: domain.RolloutProgressing}}
	done := domain.Rollout{Metadata: domain.ObjectMeta{Name: "r0"}, Status: domain.RolloutStatus{Phase: domain.RolloutSucceeded}}
	f := summarizeFleet(ts, []domain.Rollout{done, running}, time.Now())
	assert.Equal(t, 5, f.Tenants)
	assert.Equal(t, []countOf{{"Ready", 3}, {"Failed", 1}, {"Provisioning", 1}}, f.Phases)
	assert.Equal(t, [3]int{2, 1, 2}, [3]int{f.Healthy, f.Unhealthy, f.HealthUnknown})
	assert.Equal(t, [2]int{12, 8}, [2]int{f.MachinesTotal, f.MachinesReady})
	assert.Equal(t, []countOf{{"v1.13.1", 3}, {"v1.13.0", 2}}, f.Talos, "an empty version is the default one")
	assert.Equal(t, []countOf{{"v1.36.1", 3}, {"v1.35.4", 1}, {"–", 1}}, f.Kubernetes)
	var names []string
	for _, t := range f.Attention {
		names = append(names, t.Metadata.Name)
	}
	assert.Equal(t, []string{"c", "b", "d"}, names, "failed first, then the rest by name")
	assert.Equal(t, []string{"r1"}, []string{f.Rollouts[0].Metadata.Name})
	assert.Len(t, f.Rollouts, 1)

	var many []domain.Tenant
	for i := range 30 {
		many = append(many, fleetTenant(fmt.Sprintf("t%02d", i), "Degraded", "v1.13.1", "v1.36.1", "False", 1, 0))
	}
	f = summarizeFleet(many, nil, time.Now())
	assert.Len(t, f.Attention, maxAttention)
	assert.Equal(t, 30-maxAttention, f.AttentionMore)
}
