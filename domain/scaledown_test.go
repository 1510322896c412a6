package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGroupKeeps(t *testing.T) {
	for _, tc := range []struct {
		group string
		count int
		name  string
		want  bool
	}{
		{"cp", 3, "cp-0", true},
		{"cp", 3, "cp-2", true},
		{"cp", 3, "cp-3", false},
		{"cp", 1, "cp-1", false},
		{"cp", 0, "cp-0", false},
		{"cp", 3, "cp-01", false}, // not a name the group gives
		{"cp", 3, "cp-x", false},
		{"cp", 3, "cpx-0", false},
		{"cp-a", 3, "cp-a-1", true},
		{"cp", 3, "cp-a-1", false},
	} {
		require.Equal(t, tc.want, GroupKeeps(tc.group, tc.count, tc.name), "%s count %d: %s", tc.group, tc.count, tc.name)
	}
}

func TestPlanScaleDown(t *testing.T) {
	cp := func(name string, healthy bool) EtcdMember {
		return EtcdMember{Name: name, NodeGroup: "cp", Healthy: healthy}
	}
	other := func(name string, healthy bool) EtcdMember {
		return EtcdMember{Name: name, NodeGroup: "cpb", Healthy: healthy}
	}
	for _, tc := range []struct {
		name      string
		in        ScaleDown
		want      []string // removal order
		remaining int
		err       string
	}{
		{name: "nothing goes", in: ScaleDown{Members: []EtcdMember{cp("cp-0", true)}}, remaining: 1},
		{name: "3 to 1, all healthy: highest index first",
			in:   ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-1", true), cp("cp-2", true)}, Going: []string{"cp-1", "cp-2"}},
			want: []string{"cp-2", "cp-1"}, remaining: 1},
		{name: "index order is numeric",
			in: ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-2", true), cp("cp-9", true), cp("cp-10", true), cp("cp-11", true)},
				Going: []string{"cp-9", "cp-10", "cp-11", "cp-2"}},
			want: []string{"cp-11", "cp-10", "cp-9", "cp-2"}, remaining: 1},
		{name: "3 to 1, the unhealthy one goes first",
			in:   ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-1", false), cp("cp-2", true)}, Going: []string{"cp-1", "cp-2"}},
			want: []string{"cp-1", "cp-2"}, remaining: 1},
		{name: "3 to 1 keeping the unhealthy one: the last healthy step loses quorum",
			in:  ScaleDown{Members: []EtcdMember{cp("cp-0", false), cp("cp-1", true), cp("cp-2", true)}, Going: []string{"cp-1", "cp-2"}},
			err: "removing cp-2 would leave 1 healthy of 2 etcd members; quorum needs 2"},
		{name: "5 to 3 with two unhealthy going: they go first, quorum kept",
			in: ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-1", true), cp("cp-2", true), cp("cp-3", false), cp("cp-4", false)},
				Going: []string{"cp-3", "cp-4"}},
			want: []string{"cp-4", "cp-3"}, remaining: 3},
		{name: "5 to 3 with one unhealthy staying",
			in: ScaleDown{Members: []EtcdMember{cp("cp-0", false), cp("cp-1", true), cp("cp-2", true), cp("cp-3", true), cp("cp-4", true)},
				Going: []string{"cp-3", "cp-4"}},
			want: []string{"cp-4", "cp-3"}, remaining: 3},
		{name: "5 to 3 with two unhealthy staying: the first step loses quorum",
			in: ScaleDown{Members: []EtcdMember{cp("cp-0", false), cp("cp-1", false), cp("cp-2", true), cp("cp-3", true), cp("cp-4", true)},
				Going: []string{"cp-3", "cp-4"}},
			err: "removing cp-4 would leave 2 healthy of 4 etcd members; quorum needs 3"},
		{name: "no quorum now",
			in:  ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-1", false), cp("cp-2", false)}, Going: []string{"cp-1", "cp-2"}},
			err: "etcd has no quorum now (1 of 3 members healthy, 2 needed): no member can be removed safely"},
		{name: "3 to 2 leaves an even number",
			in:  ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-1", true), cp("cp-2", true)}, Going: []string{"cp-2"}},
			err: "it would leave 2 control planes: etcd needs an odd number (an even one tolerates no more failures than one fewer)"},
		{name: "a replacement may leave 2 for the while: the dead member goes",
			in:   ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-1", true), cp("cp-2", false)}, Going: []string{"cp-2"}, Replacing: true},
			want: []string{"cp-2"}, remaining: 2},
		{name: "a replacement keeps quorum at every step",
			in:  ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-1", false), cp("cp-2", true)}, Going: []string{"cp-2"}, Replacing: true},
			err: "removing cp-2 would leave 1 healthy of 2 etcd members; quorum needs 2"},
		{name: "two groups: 5 to 4 is refused as even",
			in:  ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-1", true), cp("cp-2", true), other("cpb-0", true), other("cpb-1", true)}, Going: []string{"cpb-1"}},
			err: "it would leave 4 control planes"},
		{name: "two groups: removals ordered by group",
			in: ScaleDown{Members: []EtcdMember{other("cpb-0", true), cp("cp-0", true), cp("cp-1", true), cp("cp-2", true), other("cpb-1", true)},
				Going: []string{"cpb-0", "cpb-1", "cp-2", "cp-1"}},
			want: []string{"cp-2", "cp-1", "cpb-1", "cpb-0"}, remaining: 1},
		{name: "all go while other groups exist",
			in:  ScaleDown{Members: []EtcdMember{cp("cp-0", true)}, Going: []string{"cp-0"}},
			err: "it would remove all 1 control planes while the tenant has other node groups"},
		{name: "all go with the tenant: nothing to leave",
			in:        ScaleDown{Members: []EtcdMember{cp("cp-0", true), cp("cp-1", true), cp("cp-2", false)}, Going: []string{"cp-0", "cp-1", "cp-2"}, AllowNone: true},
			remaining: 0},
		{name: "a going name that is no member is ignored",
			in:        ScaleDown{Members: []EtcdMember{cp("cp-0", true)}, Going: []string{"cp-1"}},
			remaining: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := PlanScaleDown(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, m := range plan.Remove {
				got = append(got, m.Name)
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.remaining, plan.Remaining)
		})
	}
}

func TestEtcdQuorum(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 7: 4} {
		require.Equal(t, want, EtcdQuorum(n), "%d members", n)
	}
}

func TestGroupGoing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
		names []string
		want  []string
	}{
		{"3 to 1", 1, []string{"cp-0", "cp-1", "cp-2"}, []string{"cp-1", "cp-2"}},
		{"unchanged", 3, []string{"cp-2", "cp-0", "cp-1"}, nil},
		{"to 0", 0, []string{"cp-0"}, []string{"cp-0"}},
		{"registered machines by name", 1, []string{"rack-b", "rack-a"}, []string{"rack-b"}},
	} {
		require.Equal(t, tc.want, GroupGoing("cp", tc.count, tc.names), tc.name)
	}
}
