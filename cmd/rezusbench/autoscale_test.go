package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestNearestRank(t *testing.T) {
	s := time.Second
	require.Equal(t, time.Duration(0), nearestRank(nil, 50))
	two := []time.Duration{9 * s, 3 * s}
	require.Equal(t, 3*s, nearestRank(two, 50), "p50 of 2 is the smaller")
	require.Equal(t, 9*s, nearestRank(two, 95), "p95 of 2 is the larger")
	var ten []time.Duration
	for i := 10; i >= 1; i-- {
		ten = append(ten, time.Duration(i)*s)
	}
	require.Equal(t, 5*s, nearestRank(ten, 50))
	require.Equal(t, 10*s, nearestRank(ten, 95))
	require.Equal(t, 10*s, nearestRank(ten, 100))
	require.Equal(t, 10*s, ten[0], "the input is not sorted in place")
	var fifty []time.Duration
	for i := 1; i <= 50; i++ {
		fifty = append(fifty, time.Duration(i)*s)
	}
	require.Equal(t, 48*s, nearestRank(fifty, 95))
}

// The parts of pod created → Node Ready add up to it.
func TestAutoscaleSplit(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cy := autoscaleCycle{PodCreated: at(0), Scaled: at(2100), ApplyStart: at(3700), ApplyEnd: at(9000),
		Tofu: 4800 * time.Millisecond, NodeReady: at(14000), PodRunning: at(14500),
		DownStart: at(20000), DownScaled: at(33000), DownDone: at(45000)}
	s := cy.split()
	require.Equal(t, autoscaleSplit{Total: 14 * time.Second, Decision: 2100 * time.Millisecond, Queue: 1600 * time.Millisecond,
		Tofu: 4800 * time.Millisecond, ApplyRest: 500 * time.Millisecond, Boot: 5 * time.Second, Schedule: 500 * time.Millisecond,
		DownDecision: 13 * time.Second, Down: 25 * time.Second}, s)
	require.Equal(t, s.Total, s.Decision+s.Queue+s.Tofu+s.ApplyRest+s.Boot)

	table := autoscaleTable([]autoscaleSplit{s, {Total: 20 * time.Second}})
	require.Contains(t, table, "| step (2 cycles) | p50 | p95 | max |")
	require.Contains(t, table, "| pod created → Node Ready (the figure) | 14.0 s | 20.0 s | 20.0 s |")
	require.Contains(t, table, "| · apply: tofu | 0.0 s | 4.8 s | 4.8 s |")
}

func ev(seq uint64, typ, name string, count int) benchEvent {
	var e benchEvent
	e.Seq, e.Type, e.Time = seq, typ, time.Unix(int64(seq), 0)
	e.Object.Metadata.Name, e.Object.Spec.Count = name, count
	return e
}

// The scale events are found by the count's move, after a sequence;
// status updates and other changes are not scales.
func TestScaleEvent(t *testing.T) {
	evs := []benchEvent{ev(1, "NodeGroupCreated", "workers", 1), ev(5, "NodeGroupStatusUpdated", "workers", 1),
		ev(9, "NodeGroupScaled", "workers", 2), ev(12, "NodeGroupStatusUpdated", "workers", 2),
		ev(20, "NodeGroupScaled", "workers", 1), ev(30, "NodeGroupScaled", "workers", 2), ev(31, "NodeGroupScaled", "workers", 1)}
	up, ok := scaleEvent(evs, 5, true)
	require.True(t, ok)
	require.Equal(t, uint64(9), up.Seq)
	down, ok := scaleEvent(evs, up.Seq, false)
	require.True(t, ok)
	require.Equal(t, uint64(20), down.Seq)
	up, ok = scaleEvent(evs, 20, true)
	require.True(t, ok)
	require.Equal(t, uint64(30), up.Seq)
	_, ok = scaleEvent(evs, 31, false)
	require.False(t, ok)
	_, ok = scaleEvent(evs[:2], 0, true)
	require.False(t, ok)
}

// The apply of a scale is the one its sources name; without one, the
// first that started after the event.
func TestApplyFor(t *testing.T) {
	t0 := time.Unix(100, 0)
	apply := func(name string, start int, sources ...string) domain.Apply {
		var a domain.Apply
		st := t0.Add(time.Duration(start) * time.Second)
		a.Metadata.Name, a.Status.StartTime, a.Spec.Sources = name, &st, sources
		return a
	}
	scale := ev(42, "NodeGroupScaled", "workers", 2)
	scale.Time = t0.Add(10 * time.Second)
	applies := []domain.Apply{apply("a3", 30, "NodeGroup/workers@42"), apply("a1", 0, "NodeGroup/workers@7"),
		apply("a2", 12, "Tenant/auto@40"), {Metadata: domain.ObjectMeta{Name: "queued"}}}
	a, ok := applyFor(applies, "workers", scale)
	require.True(t, ok)
	require.Equal(t, "a3", a.Metadata.Name)
	a, ok = applyFor(applies[1:], "workers", scale)
	require.True(t, ok)
	require.Equal(t, "a2", a.Metadata.Name, "none names it: the first after it")
	_, ok = applyFor(applies[1:2], "workers", scale)
	require.False(t, ok)
}

// A machine built again after its MachineDeleted counts once; a name used
// once and removed does not count.
func TestRebuiltMachines(t *testing.T) {
	require.Empty(t, rebuiltMachines([]benchEvent{ev(1, "MachineCreated", "workers-0", 0), ev(2, "MachineCreated", "workers-1", 0),
		ev(3, "MachineStatusUpdated", "workers-1", 0), ev(4, "MachineDeleted", "workers-1", 0), ev(5, "MachineCreated", "workers-2", 0),
		ev(6, "MachineDeleted", "workers-2", 0)}))
	require.Equal(t, []string{"workers-1"}, rebuiltMachines([]benchEvent{ev(1, "MachineCreated", "workers-1", 0),
		ev(2, "MachineDeleted", "workers-1", 0), ev(3, "MachineCreated", "workers-1", 0), ev(4, "MachineDeleted", "workers-1", 0),
		ev(5, "MachineCreated", "workers-1", 0)}))
}

func TestOrphans(t *testing.T) {
	machine := func(name, group, hostname string) domain.Machine {
		var m domain.Machine
		m.Metadata.Name, m.Spec.NodeGroup, m.Spec.Hostname = name, group, hostname
		return m
	}
	group := func(name string, count int, members *domain.Members) domain.NodeGroup {
		var g domain.NodeGroup
		g.Metadata.Name, g.Spec.Count, g.Spec.Members = name, count, members
		return g
	}
	groups := []domain.NodeGroup{group("cp", 1, nil), group("workers", 1, &domain.Members{Indexes: []int{3}, Next: 4})}
	machines := []domain.Machine{machine("cp-0", "cp", "auto-cp-0"), machine("workers-3", "workers", "")}
	nodes := []emulatorNode{{Name: "auto-cp-0", Cluster: "auto"}, {Name: "workers-3", Cluster: "auto"}, {Name: "other-0", Cluster: "other"}}
	unnamed, unkept := orphans("auto", nodes, machines, groups)
	require.Empty(t, unnamed)
	require.Empty(t, unkept)

	nodes = append(nodes, emulatorNode{Name: "workers-2", Cluster: "auto"})
	machines = append(machines, machine("workers-1", "workers", ""), machine("gpu-0", "gpu", ""))
	unnamed, unkept = orphans("auto", nodes, machines, groups)
	require.Equal(t, []string{"workers-2"}, unnamed, "a node no Machine names")
	require.Equal(t, []string{"workers-1", "gpu-0"}, unkept, "a member the group dropped, a group gone")
}

// A Node's Ready time is of its current registration; a name registered
// again after it was deleted is resurrected, once.
func TestNodeHistory(t *testing.T) {
	h := newNodeHistory()
	t0 := time.Unix(100, 0)
	h.seen("cp-0", true, t0)
	h.seen("workers-0", false, t0)
	h.seen("workers-0", true, t0.Add(time.Second))
	h.seen("workers-0", true, t0.Add(2*time.Second))
	at, ok := h.readyAt("workers-0")
	require.True(t, ok)
	require.Equal(t, t0.Add(time.Second), at)
	h.seen("workers-1", false, t0)
	_, ok = h.readyAt("workers-1")
	require.False(t, ok)
	require.Equal(t, []string{"cp-0", "workers-0", "workers-1"}, h.names())
	h.gone("workers-1")
	require.Equal(t, []string{"cp-0", "workers-0"}, h.names())
	require.Empty(t, h.resurrected())
	h.seen("workers-1", true, t0.Add(time.Minute))
	h.seen("workers-1", true, t0.Add(2*time.Minute))
	h.gone("workers-1")
	h.seen("workers-1", false, t0.Add(3*time.Minute))
	require.Equal(t, []string{"workers-1"}, h.resurrected())
	_, ok = h.readyAt("workers-1")
	require.False(t, ok, "the Ready of an earlier registration does not count")
}
