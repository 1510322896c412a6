package domain

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Scale-down rules: which machines a smaller node group loses, and in which
// order control planes leave etcd so that no step loses quorum. Both the API
// (refusing a change up front, from the machines' observed readiness) and the
// apply worker (before tofu destroys anything, from the live etcd membership)
// decide with these functions.

// EtcdMember is one control-plane machine as a scale-down sees it.
type EtcdMember struct {
	// Name is the Machine's name.
	Name string
	// NodeGroup is the group it belongs to.
	NodeGroup string
	// Healthy is false when it is known not to serve etcd (unreachable, not
	// ready, member errors).
	Healthy bool
}

// ScaleDown is the input of PlanScaleDown.
type ScaleDown struct {
	// Members are every control plane of the tenant that is an etcd member
	// now, the ones that stay and the ones that go.
	Members []EtcdMember
	// Going names the members that are removed.
	Going []string
	// AllowNone lets the last control planes go: the tenant is deleted or
	// has no other node group, so there is no cluster left to keep.
	AllowNone bool
	// Replacing says the going members come back (a remediation replaces
	// their machines): an even number of members left for the while is
	// allowed; quorum at every step is not waived.
	Replacing bool
}

// ScaleDownPlan is the order in which members leave etcd.
type ScaleDownPlan struct {
	// Remove lists the members that leave, one at a time, in order.
	Remove []EtcdMember
	// Remaining is how many members stay.
	Remaining int
}

// EtcdQuorum is the number of healthy members a cluster of n members needs.
func EtcdQuorum(n int) int { return n/2 + 1 }

// GroupKeeps reports whether a node group of count machines keeps the
// machine called name: a group keeps <group>-0 .. <group>-(count-1), so
// lowering the count destroys the highest indexes.
func GroupKeeps(group string, count int, name string) bool {
	rest, ok := strings.CutPrefix(name, group+"-")
	if !ok {
		return false
	}
	i, err := strconv.Atoi(rest)
	return err == nil && i >= 0 && i < count && strconv.Itoa(i) == rest
}

// PlanScaleDown orders the going members and checks that every step keeps
// etcd quorum. Unhealthy members go first (removing one raises the share of
// healthy members), then healthy ones from the highest index down, so the
// member a group keeps longest is its first machine. It refuses (the error
// says why, in words fit for an API cause):
//   - a cluster without quorum now: membership cannot change at all;
//   - a step after which the remaining members have fewer healthy ones than
//     their quorum (floor(k/2)+1 of k);
//   - an even number of remaining control planes (no fault tolerance gained
//     over one fewer, and a tie can split the cluster), unless Replacing;
//   - no control plane left, unless AllowNone.
func PlanScaleDown(in ScaleDown) (ScaleDownPlan, error) {
	going := map[string]bool{}
	for _, n := range in.Going {
		going[n] = true
	}
	var remove []EtcdMember
	healthy := 0
	for _, m := range in.Members {
		if m.Healthy {
			healthy++
		}
		if going[m.Name] {
			remove = append(remove, m)
		}
	}
	size := len(in.Members)
	plan := ScaleDownPlan{Remaining: size - len(remove)}
	if len(remove) == 0 {
		return plan, nil
	}
	if plan.Remaining == 0 {
		if !in.AllowNone {
			return plan, fmt.Errorf("it would remove all %d control planes while the tenant has other node groups; a cluster needs at least one", size)
		}
		// The whole cluster goes: there is no membership left to keep.
		return plan, nil
	}
	if plan.Remaining%2 == 0 && !in.Replacing {
		return plan, fmt.Errorf("it would leave %d control planes: etcd needs an odd number (an even one tolerates no more failures than one fewer)", plan.Remaining)
	}
	slices.SortStableFunc(remove, compareRemoval)
	if healthy < EtcdQuorum(size) {
		return plan, fmt.Errorf("etcd has no quorum now (%d of %d members healthy, %d needed): no member can be removed safely", healthy, size, EtcdQuorum(size))
	}
	for _, m := range remove {
		size--
		if m.Healthy {
			healthy--
		}
		if healthy < EtcdQuorum(size) {
			return plan, fmt.Errorf("removing %s would leave %d healthy of %d etcd members; quorum needs %d", m.Name, healthy, size, EtcdQuorum(size))
		}
	}
	plan.Remove = remove
	return plan, nil
}

// compareRemoval orders unhealthy members first, then by node group, then
// by index from the highest down.
func compareRemoval(a, b EtcdMember) int {
	if a.Healthy != b.Healthy {
		if !a.Healthy {
			return -1
		}
		return 1
	}
	if c := strings.Compare(a.NodeGroup, b.NodeGroup); c != 0 {
		return c
	}
	ia, oka := machineIndex(a.NodeGroup, a.Name)
	ib, okb := machineIndex(b.NodeGroup, b.Name)
	if oka && okb && ia != ib {
		if ia > ib {
			return -1
		}
		return 1
	}
	return -strings.Compare(a.Name, b.Name)
}

// machineIndex is the index of a machine named <group>-<index>.
func machineIndex(group, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, group+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil
}

// GroupGoing names the machines of a node group that go when it has count
// machines: those named <group>-<index> with index >= count (tofu and listed
// metal machines), and of machines with other names (registered metal
// machines a selector picks) those after the first count, by name.
func GroupGoing(group string, count int, names []string) []string {
	return GroupGoingOf(group, &NodeGroupSpec{Count: count}, names)
}

// GroupGoingOf is GroupGoing for a group's spec: a machine named
// <group>-<index> goes when the spec does not keep it (its members, or
// 0..count-1 without them).
func GroupGoingOf(group string, spec *NodeGroupSpec, names []string) []string {
	var going, other []string
	for _, n := range names {
		if _, ok := machineIndex(group, n); ok {
			if !spec.Keeps(group, n) {
				going = append(going, n)
			}
			continue
		}
		other = append(other, n)
	}
	slices.Sort(other)
	if len(other) > spec.Count {
		going = append(going, other[spec.Count:]...)
	}
	return going
}
