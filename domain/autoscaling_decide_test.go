package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func autoSpec(count int, members *domain.Members) domain.NodeGroupSpec {
	return domain.NodeGroupSpec{Role: domain.RoleWorker, Count: count, Provider: "emu",
		UpdateStrategy: domain.UpdateStrategy{MaxParallelism: 1},
		Autoscaling:    &domain.Autoscaling{MinCount: 1, MaxCount: 3}, Members: members}
}

func TestDecideAutoscalerRequests(t *testing.T) {
	none := func(string) bool { return false }
	builtUpTo := func(names ...string) func(string) bool {
		return func(n string) bool {
			for _, b := range names {
				if b == n {
					return true
				}
			}
			return false
		}
	}
	tests := []struct {
		name string
		do   func() (domain.NodeGroupSpec, error)
		// want is the next count and list; wantPre/wantErr the refusal.
		wantCount   int
		wantMembers *domain.Members
		wantErr     string
		wantPre     bool
	}{
		{name: "increase within max", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideIncrease("w", autoSpec(1, nil), 2)
		}, wantCount: 3, wantMembers: &domain.Members{Indexes: []int{0, 1, 2}, Next: 3}},
		{name: "increase beyond max is an error, not a clamp", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideIncrease("w", autoSpec(2, nil), 2)
		}, wantErr: "2 + 2 machines is above maxCount 3"},
		{name: "increase of zero", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideIncrease("w", autoSpec(2, nil), 0)
		}, wantErr: "delta must be positive"},
		{name: "a group that does not autoscale", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideIncrease("w", domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 1}, 1)
		}, wantErr: "does not autoscale", wantPre: true},
		{name: "delete the named machine, not the last", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideDeleteNodes("w", autoSpec(3, &domain.Members{Indexes: []int{0, 1, 2}, Next: 3}), []string{"w-1"})
		}, wantCount: 2, wantMembers: &domain.Members{Indexes: []int{0, 2}, Next: 3}},
		{name: "delete retried after it was done", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideDeleteNodes("w", autoSpec(2, &domain.Members{Indexes: []int{0, 2}, Next: 3}), []string{"w-1"})
		}, wantCount: 2, wantMembers: &domain.Members{Indexes: []int{0, 2}, Next: 3}},
		{name: "delete below min", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideDeleteNodes("w", autoSpec(1, nil), []string{"w-0"})
		}, wantErr: "below minCount 1", wantPre: true},
		{name: "delete a machine of another group", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideDeleteNodes("w", autoSpec(2, nil), []string{"db-0"})
		}, wantErr: "not of node group w"},
		{name: "delete an index never used", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideDeleteNodes("w", autoSpec(2, nil), []string{"w-7"})
		}, wantErr: "no such index"},
		{name: "delete a name that only looks like an index", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideDeleteNodes("w", autoSpec(2, nil), []string{"w-01"})
		}, wantErr: "not of node group w"},
		{name: "decrease drops the newest unbuilt machines", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideDecreaseTarget("w", autoSpec(3, &domain.Members{Indexes: []int{0, 4, 5}, Next: 6}), -1, builtUpTo("w-0"))
		}, wantCount: 2, wantMembers: &domain.Members{Indexes: []int{0, 4}, Next: 6}},
		{name: "decrease never drops a built machine", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideDecreaseTarget("w", autoSpec(3, nil), -2, builtUpTo("w-0", "w-2"))
		}, wantErr: "only 1 of its 3 machines are not built", wantPre: true},
		{name: "decrease with a positive delta", do: func() (domain.NodeGroupSpec, error) {
			return domain.DecideDecreaseTarget("w", autoSpec(3, nil), 1, none)
		}, wantErr: "delta must be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.do()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				var ae *domain.AutoscalerError
				require.ErrorAs(t, err, &ae)
				require.Equal(t, tc.wantPre, ae.Precondition)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantCount, got.Count)
			require.Equal(t, tc.wantMembers, got.Members)
			require.Empty(t, got.Validate("spec"), "the next spec is valid")
		})
	}
}

func TestGroupInstances(t *testing.T) {
	spec := autoSpec(3, &domain.Members{Indexes: []int{0, 2, 3}, Next: 4})
	ready := func(n string) bool { return n == "w-0" }
	in := domain.InstancesInput{Tenant: "acme", Group: "w", Spec: &spec, Machines: []string{"w-0", "w-1", "w-2"}, Ready: ready}
	got := domain.GroupInstances(in)
	require.Equal(t, []domain.AutoscaledInstance{
		{ID: "rezuscloud://acme/w-0", State: domain.InstanceRunning},
		{ID: "rezuscloud://acme/w-2", State: domain.InstanceCreating},
		{ID: "rezuscloud://acme/w-3", State: domain.InstanceCreating},
		{ID: "rezuscloud://acme/w-1", State: domain.InstanceDeleting},
	}, got)

	in.ApplyError = "creating server: Quota exceeded for cores"
	got = domain.GroupInstances(in)
	require.Equal(t, domain.AutoscaledInstance{ID: "rezuscloud://acme/w-3", State: domain.InstanceCreating,
		ErrorCode: "OutOfResources", ErrorMessage: in.ApplyError, ErrorClass: domain.InstanceOutOfResources}, got[2])
	require.Empty(t, got[1].ErrorCode, "a built machine waiting for its Node is not failed")
	in.ApplyError = "tofu: provider crashed"
	require.Equal(t, domain.InstanceOtherError, domain.GroupInstances(in)[2].ErrorClass)

	tenant, machine, ok := domain.ParseAutoscalerProviderID("rezuscloud://acme/w-3")
	require.True(t, ok)
	require.Equal(t, [2]string{"acme", "w-3"}, [2]string{tenant, machine})
	for _, bad := range []string{"emulated://w-3", "rezuscloud://acme", "rezuscloud:///w-3", "rezuscloud://acme/w/3"} {
		_, _, ok := domain.ParseAutoscalerProviderID(bad)
		require.False(t, ok, bad)
	}
}
