package domain

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Autoscaling of node groups (issue 48): the cluster-autoscaler, through
// RezusCloud's externalgrpc service, moves spec.count of a group that
// declares spec.autoscaling within its bounds, and removes the very
// machines it names. A group's machines are named <group>-<index>; without
// spec.members they are the indexes 0..count-1 (lowering the count
// destroys the highest), with it they are exactly the listed indexes, so
// that one machine in the middle can go without another taking its place,
// and an index once used is never used again (spec.members.next).

// MaxAutoscaledCount bounds an autoscaled group's maxCount.
const MaxAutoscaledCount = MaxNodeGroupCount

// Autoscaling bounds the size the autoscaler gives a node group.
type Autoscaling struct {
	// MinCount is the fewest machines, 0..MaxCount (0 scales from zero).
	MinCount int `json:"minCount"`
	// MaxCount is the most machines, MinCount..MaxAutoscaledCount.
	MaxCount int `json:"maxCount"`
	// Capacity is what one machine of the group offers (cpu, memory,
	// pods, ephemeral-storage, extended resources), as Kubernetes
	// quantities: the template the autoscaler simulates a new Node with,
	// so that the group can scale from zero. Absent, the provider type's
	// own (the emulator's 4 CPUs and 8Gi), else a running Node's.
	Capacity map[string]string `json:"capacity,omitempty"`
}

// quantity is the shape of a Kubernetes resource quantity this accepts.
var quantity = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$`)

// Members are a node group's machines by index, when the group has ever
// autoscaled or lost one named machine.
type Members struct {
	// Indexes of the machines <group>-<index>, ascending; as many as
	// spec.count.
	Indexes []int `json:"indexes"`
	// Next is the index the next new machine gets: above every index the
	// group ever used, so a removed machine's name never comes back.
	Next int `json:"next"`
}

// MachineIndexes are the indexes of the group's machines.
func (s *NodeGroupSpec) MachineIndexes() []int {
	if s.Members != nil {
		return slices.Clone(s.Members.Indexes)
	}
	out := make([]int, s.Count)
	for i := range out {
		out[i] = i
	}
	return out
}

// MachineNames are the names of the group's machines.
func (s *NodeGroupSpec) MachineNames(group string) []string {
	idx := s.MachineIndexes()
	out := make([]string, len(idx))
	for i, n := range idx {
		out[i] = group + "-" + strconv.Itoa(n)
	}
	return out
}

// Keeps reports whether the group keeps the machine called name.
func (s *NodeGroupSpec) Keeps(group, name string) bool {
	i, ok := machineIndex(group, name)
	if !ok || strconv.Itoa(i) != name[len(group)+1:] {
		return false
	}
	if s.Members == nil {
		return i >= 0 && i < s.Count
	}
	_, found := slices.BinarySearch(s.Members.Indexes, i)
	return found
}

// validateAutoscaling checks the bounds and the member list on their own;
// the count against the list is checked once an update's list is known
// (nodeGroupSpecMembers).
func (s *NodeGroupSpec) validateAutoscaling(f *field.Path) []Cause {
	var causes []Cause
	if a := s.Autoscaling; a != nil {
		p := f.Child("autoscaling")
		switch {
		case s.Role == RoleControlPlane:
			causes = append(causes, Cause{Field: p.String(), Type: CauseForbidden,
				Message: "control-plane groups do not autoscale: their size is etcd's quorum"})
		case a.MinCount < 0 || a.MinCount > a.MaxCount:
			causes = append(causes, Cause{Field: p.Child("minCount").String(), Type: CauseInvalid,
				Message: fmt.Sprintf("must be between 0 and maxCount (%d), got %d", a.MaxCount, a.MinCount)})
		case a.MaxCount < 1 || a.MaxCount > MaxAutoscaledCount:
			causes = append(causes, Cause{Field: p.Child("maxCount").String(), Type: CauseInvalid,
				Message: fmt.Sprintf("must be between 1 and %d, got %d", MaxAutoscaledCount, a.MaxCount)})
		case len(a.Capacity) > 16:
			causes = append(causes, Cause{Field: p.Child("capacity").String(), Type: CauseTooLong, Message: "at most 16 resources"})
		case s.Count < a.MinCount || s.Count > a.MaxCount:
			causes = append(causes, Cause{Field: f.Child("count").String(), Type: CauseInvalid,
				Message: fmt.Sprintf("the autoscaler owns the size of this group within %d..%d: a count of %d is outside them (change spec.autoscaling first)",
					a.MinCount, a.MaxCount, s.Count)})
		}
	}
	if a := s.Autoscaling; a != nil {
		for _, k := range slices.Sorted(maps.Keys(a.Capacity)) {
			p := f.Child("autoscaling", "capacity").Key(k)
			if probs := labelKeyProblems(k); len(probs) > 0 {
				causes = append(causes, labelCause(p, "resource name", probs))
			}
			if !quantity.MatchString(a.Capacity[k]) {
				causes = append(causes, Cause{Field: p.String(), Type: CauseInvalid,
					Message: fmt.Sprintf("%q is not a quantity such as 4, 500m or 8Gi", a.Capacity[k])})
			}
		}
	}
	if m := s.Members; m != nil {
		p := f.Child("members")
		if s.Role == RoleControlPlane {
			causes = append(causes, Cause{Field: p.String(), Type: CauseForbidden,
				Message: "control-plane machines are chosen by count (etcd membership order)"})
		}
		if len(m.Indexes) > MaxNodeGroupCount {
			causes = append(causes, Cause{Field: p.Child("indexes").String(), Type: CauseTooLong,
				Message: fmt.Sprintf("at most %d machines", MaxNodeGroupCount)})
			return causes
		}
		for i, n := range m.Indexes {
			switch {
			case n < 0 || n >= m.Next:
				causes = append(causes, Cause{Field: p.Child("indexes").Index(i).String(), Type: CauseInvalid,
					Message: fmt.Sprintf("must be between 0 and next-1 (%d), got %d", m.Next-1, n)})
			case i > 0 && n == m.Indexes[i-1]:
				causes = append(causes, Cause{Field: p.Child("indexes").Index(i).String(), Type: CauseDuplicate,
					Message: fmt.Sprintf("index %d is listed twice", n)})
			}
		}
		if m.Next < 0 || m.Next > maxMemberIndex {
			causes = append(causes, Cause{Field: p.Child("next").String(), Type: CauseInvalid,
				Message: fmt.Sprintf("must be between 0 and %d, got %d", maxMemberIndex, m.Next)})
		}
	}
	return causes
}

// maxMemberIndex bounds members.next: a group that added a machine every
// minute would reach it in 190 years.
const maxMemberIndex = 100_000_000

// defaultMembers sorts the indexes (the canonical form).
func (m *Members) defaultMembers() {
	slices.Sort(m.Indexes)
}

// DecideMembers is the member list of a group whose spec goes from cur
// (nil: it is created) to next, given next as the request has it:
//   - a list the request leaves out, or sends back unchanged, follows the
//     count: a higher count adds new indexes from next, a lower one drops
//     the highest indexes;
//   - a list the request changes is taken as it is (removing named
//     machines), and must hold as many indexes as the count, none of them
//     new below the current next (a removed machine never comes back);
//   - a group that starts to autoscale gets its list (its machines as they
//     are, 0..count-1), which it keeps from then on.
//
// It returns the list to store (nil: none) or the causes of a refusal.
func DecideMembers(cur *NodeGroupSpec, next NodeGroupSpec) (*Members, []Cause) {
	f := field.NewPath("spec", "members")
	var have *Members
	if cur != nil {
		have = cur.Members
	}
	req := next.Members
	if req == nil || (have != nil && membersEqual(req, have)) {
		base := have
		if base == nil {
			if next.Autoscaling == nil {
				return nil, nil
			}
			n := next.Count
			if cur != nil {
				n = cur.Count
			}
			base = &Members{Indexes: make([]int, n), Next: n}
			for i := range base.Indexes {
				base.Indexes[i] = i
			}
		}
		return resize(base, next.Count), nil
	}
	// Taken as sent: checked against the count and what was used.
	if len(req.Indexes) != next.Count {
		return nil, []Cause{{Field: f.Child("indexes").String(), Type: CauseInvalid,
			Message: fmt.Sprintf("lists %d machines but spec.count is %d", len(req.Indexes), next.Count)}}
	}
	if have != nil {
		if req.Next < have.Next {
			return nil, []Cause{{Field: f.Child("next").String(), Type: CauseInvalid,
				Message: fmt.Sprintf("must not go down (it is %d): an index once used is not used again", have.Next)}}
		}
		for i, n := range req.Indexes {
			if _, ok := slices.BinarySearch(have.Indexes, n); !ok && n < have.Next {
				return nil, []Cause{{Field: f.Child("indexes").Index(i).String(), Type: CauseInvalid,
					Message: fmt.Sprintf("machine %d was removed: its index is not used again (new machines start at %d)", n, have.Next)}}
			}
		}
	}
	out := &Members{Indexes: slices.Clone(req.Indexes), Next: req.Next}
	return out, nil
}

// resize gives m count indexes: new ones from m.Next up, or without the
// highest ones.
func resize(m *Members, count int) *Members {
	out := &Members{Indexes: slices.Clone(m.Indexes), Next: m.Next}
	if count < len(out.Indexes) {
		out.Indexes = out.Indexes[:max(count, 0)]
	}
	for len(out.Indexes) < count {
		out.Indexes = append(out.Indexes, out.Next)
		out.Next++
	}
	return out
}

func membersEqual(a, b *Members) bool {
	return a.Next == b.Next && slices.Equal(a.Indexes, b.Indexes)
}

// nodeGroupSpecMembers applies DecideMembers to a normalised spec (cur nil
// on a create) and returns it canonical.
func nodeGroupSpecMembers(cur, next json.RawMessage) (json.RawMessage, []Cause) {
	var n NodeGroupSpec
	if err := json.Unmarshal(next, &n); err != nil {
		return next, nil // normalised already; cannot happen
	}
	var c *NodeGroupSpec
	if cur != nil {
		c = &NodeGroupSpec{}
		if err := json.Unmarshal(cur, c); err != nil {
			c = nil
		}
	}
	m, causes := DecideMembers(c, n)
	if len(causes) > 0 {
		return nil, causes
	}
	if m == nil && n.Members == nil {
		return next, nil
	}
	n.Members = m
	out, err := json.Marshal(&n)
	if err != nil {
		return next, nil
	}
	return out, nil
}
