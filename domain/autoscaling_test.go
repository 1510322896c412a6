package domain_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// membersOf is the spec.members an object stores (nil: none).
func membersOf(t *testing.T, o *domain.Object) *domain.Members {
	t.Helper()
	var s domain.NodeGroupSpec
	require.NoError(t, json.Unmarshal(o.Spec, &s))
	return s.Members
}

// A group's machines through creates and updates of its spec: what the
// autoscaler's increase, decrease and named deletion, and a user's edits,
// make of them.
func TestNodeGroupMembers(t *testing.T) {
	ref := refOf("NodeGroup", "t1", "w")
	create := func(t *testing.T, spec string) (*domain.Object, error) {
		evs, err := domain.Decide(nil, command(domain.OpCreate, ref, newObject("NodeGroup", spec)))
		if err != nil {
			return nil, err
		}
		return domain.Evolve(nil, &evs[0], 3), nil
	}
	var lastEvent string
	update := func(t *testing.T, st *domain.Object, spec string) (*domain.Object, error) {
		b := bodyOf(st)
		b.Spec = json.RawMessage(spec)
		evs, err := domain.Decide(st, command(domain.OpUpdate, ref, b))
		if err != nil {
			return nil, err
		}
		require.Len(t, evs, 1)
		lastEvent = evs[0].Type
		return domain.Evolve(st, &evs[0], uint64(st.Metadata.Generation)+10), nil
	}
	auto := `"autoscaling":{"minCount":1,"maxCount":5}`
	tests := []struct {
		name string
		// start is the created spec; steps the updates after it, in order.
		start string
		steps []string
		// want is the last object's members (nil: none); wantFields the
		// causes of the refusal of the last step.
		want       *domain.Members
		wantFields []string
		wantEvent  string
	}{
		{name: "a plain group has no list", start: `{"role":"worker","count":3,"provider":"emu"}`},
		{name: "a plain group scales by count, without a list",
			start: `{"role":"worker","count":3,"provider":"emu"}`,
			steps: []string{`{"role":"worker","count":1,"provider":"emu"}`}},
		{name: "an autoscaled group gets its machines as they are",
			start: `{"role":"worker","count":2,"provider":"emu",` + auto + `}`,
			want:  &domain.Members{Indexes: []int{0, 1}, Next: 2}},
		{name: "starting to autoscale keeps the machines there are",
			start: `{"role":"worker","count":3,"provider":"emu"}`,
			steps: []string{`{"role":"worker","count":4,"provider":"emu",` + auto + `}`},
			want:  &domain.Members{Indexes: []int{0, 1, 2, 3}, Next: 4}, wantEvent: "NodeGroupUpdated"},
		{name: "increase adds new indexes",
			start: `{"role":"worker","count":2,"provider":"emu",` + auto + `}`,
			steps: []string{`{"role":"worker","count":4,"provider":"emu",` + auto + `}`},
			want:  &domain.Members{Indexes: []int{0, 1, 2, 3}, Next: 4}, wantEvent: "NodeGroupScaled"},
		{name: "a named machine goes, the others stay",
			start: `{"role":"worker","count":3,"provider":"emu",` + auto + `}`,
			steps: []string{`{"role":"worker","count":2,"provider":"emu",` + auto + `,"members":{"indexes":[0,2],"next":3}}`},
			want:  &domain.Members{Indexes: []int{0, 2}, Next: 3}, wantEvent: "NodeGroupScaled"},
		{name: "after a named removal, growth never reuses the index",
			start: `{"role":"worker","count":3,"provider":"emu",` + auto + `}`,
			steps: []string{
				`{"role":"worker","count":2,"provider":"emu",` + auto + `,"members":{"indexes":[0,2],"next":3}}`,
				`{"role":"worker","count":3,"provider":"emu",` + auto + `}`,
			},
			want: &domain.Members{Indexes: []int{0, 2, 3}, Next: 4}},
		{name: "a list sent back unchanged follows the count (a merge patch of count)",
			start: `{"role":"worker","count":3,"provider":"emu",` + auto + `}`,
			steps: []string{`{"role":"worker","count":2,"provider":"emu",` + auto + `,"members":{"indexes":[0,1,2],"next":3}}`},
			want:  &domain.Members{Indexes: []int{0, 1}, Next: 3}},
		{name: "the list stays when autoscaling ends",
			start: `{"role":"worker","count":3,"provider":"emu",` + auto + `}`,
			steps: []string{
				`{"role":"worker","count":2,"provider":"emu",` + auto + `,"members":{"indexes":[1,2],"next":3}}`,
				`{"role":"worker","count":2,"provider":"emu"}`,
			},
			want: &domain.Members{Indexes: []int{1, 2}, Next: 3}},
		{name: "a removed index does not come back",
			start: `{"role":"worker","count":3,"provider":"emu",` + auto + `}`,
			steps: []string{
				`{"role":"worker","count":2,"provider":"emu",` + auto + `,"members":{"indexes":[0,2],"next":3}}`,
				`{"role":"worker","count":3,"provider":"emu",` + auto + `,"members":{"indexes":[0,1,2],"next":3}}`,
			},
			wantFields: []string{"spec.members.indexes[1]"}},
		{name: "next does not go down",
			start:      `{"role":"worker","count":3,"provider":"emu",` + auto + `}`,
			steps:      []string{`{"role":"worker","count":2,"provider":"emu",` + auto + `,"members":{"indexes":[0,1],"next":2}}`},
			wantFields: []string{"spec.members.next"}},
		{name: "a list must match the count",
			start:      `{"role":"worker","count":3,"provider":"emu",` + auto + `}`,
			steps:      []string{`{"role":"worker","count":3,"provider":"emu",` + auto + `,"members":{"indexes":[0,2],"next":3}}`},
			wantFields: []string{"spec.members.indexes"}},
		{name: "a count outside the bounds is refused",
			start:      `{"role":"worker","count":3,"provider":"emu",` + auto + `}`,
			steps:      []string{`{"role":"worker","count":6,"provider":"emu",` + auto + `}`},
			wantFields: []string{"spec.count"}},
		{name: "bounds the wrong way round",
			start:      `{"role":"worker","count":3,"provider":"emu","autoscaling":{"minCount":4,"maxCount":2}}`,
			wantFields: []string{"spec.autoscaling.minCount"}},
		{name: "maxCount above the bound",
			start:      `{"role":"worker","count":3,"provider":"emu","autoscaling":{"minCount":0,"maxCount":100000}}`,
			wantFields: []string{"spec.autoscaling.maxCount"}},
		{name: "control planes do not autoscale",
			start:      `{"role":"controlplane","count":3,"provider":"emu","autoscaling":{"minCount":1,"maxCount":5}}`,
			wantFields: []string{"spec.autoscaling"}},
		{name: "a list with an index twice",
			start:      `{"role":"worker","count":2,"provider":"emu","members":{"indexes":[1,1],"next":3}}`,
			wantFields: []string{"spec.members.indexes[1]"}},
		{name: "a list with an index at next",
			start:      `{"role":"worker","count":2,"provider":"emu","members":{"indexes":[0,3],"next":3}}`,
			wantFields: []string{"spec.members.indexes[1]"}},
		{name: "scale from zero",
			start: `{"role":"worker","count":0,"provider":"emu","autoscaling":{"minCount":0,"maxCount":3}}`,
			steps: []string{`{"role":"worker","count":1,"provider":"emu","autoscaling":{"minCount":0,"maxCount":3}}`},
			want:  &domain.Members{Indexes: []int{0}, Next: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := create(t, tc.start)
			for _, s := range tc.steps {
				if err != nil {
					break
				}
				st, err = update(t, st, s)
			}
			if tc.wantEvent != "" {
				require.Equal(t, tc.wantEvent, lastEvent)
			}
			if tc.wantFields != nil {
				require.Error(t, err)
				require.Equal(t, domain.ReasonInvalid, err.(*domain.Error).Reason)
				require.Equal(t, tc.wantFields, errFields(t, err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, membersOf(t, st))
		})
	}
}

// Which machines a group keeps and loses, with and without a list.
func TestGroupGoingOfMembers(t *testing.T) {
	names := []string{"w-0", "w-1", "w-2", "w-3"}
	plain := &domain.NodeGroupSpec{Count: 2}
	require.Equal(t, []string{"w-2", "w-3"}, domain.GroupGoingOf("w", plain, names))
	listed := &domain.NodeGroupSpec{Count: 2, Members: &domain.Members{Indexes: []int{1, 3}, Next: 4}}
	require.Equal(t, []string{"w-0", "w-2"}, domain.GroupGoingOf("w", listed, names))
	require.Equal(t, []string{"w-1", "w-3"}, listed.MachineNames("w"))
	require.True(t, listed.Keeps("w", "w-3"))
	require.False(t, listed.Keeps("w", "w-03"), "not the name of index 3")
	require.False(t, listed.Keeps("w", "x-3"))
	require.Equal(t, []int{0, 1}, plain.MachineIndexes())
}

func TestAutoscalingCapacity(t *testing.T) {
	ok := domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 0, Provider: "emu", UpdateStrategy: domain.UpdateStrategy{MaxParallelism: 1},
		Autoscaling: &domain.Autoscaling{MinCount: 0, MaxCount: 2, Capacity: map[string]string{"cpu": "3500m", "memory": "8Gi", "nvidia.com/gpu": "1"}}}
	require.Empty(t, ok.Validate("spec"))
	bad := ok
	bad.Autoscaling = &domain.Autoscaling{MaxCount: 2, Capacity: map[string]string{"cpu": "lots", "Bad Key": "1"}}
	var fields []string
	for _, c := range bad.Validate("spec") {
		fields = append(fields, c.Field)
	}
	require.Equal(t, []string{"spec.autoscaling.capacity[Bad Key]", "spec.autoscaling.capacity[cpu]"}, fields)
}
