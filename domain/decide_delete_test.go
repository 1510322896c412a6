package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDecideDelete(t *testing.T) {
	tests := []struct {
		name       string
		state      func(t *testing.T) *domain.Object
		ref        domain.Ref
		dependents int
		expected   string
		wantReason domain.Reason
		// wantType and wantAction describe the one event; empty wantType means none.
		wantType   string
		wantAction domain.Action
		check      func(t *testing.T, st, o *domain.Object)
	}{
		{
			name:       "without finalizers the object is deleted",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			wantType:   "TenantDeleted",
			wantAction: domain.ActionDeleted,
			check: func(t *testing.T, st, o *domain.Object) {
				require.NotNil(t, o.Metadata.DeletionTimestamp)
				require.True(t, o.Metadata.DeletionTimestamp.Equal(testNow))
				require.Equal(t, time.UTC, o.Metadata.DeletionTimestamp.Location())
			},
		},
		{
			name:       "node group without finalizers",
			state:      func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:        refOf("NodeGroup", "t1", "workers"),
			wantType:   "NodeGroupDeleted",
			wantAction: domain.ActionDeleted,
		},
		{
			name: "with finalizers deletion is requested",
			state: func(t *testing.T) *domain.Object {
				return tenantState(t, func(o *domain.Object) { o.Metadata.Finalizers = []string{"rezuscloud.io/destroy"} })
			},
			wantType:   "TenantDeletionRequested",
			wantAction: domain.ActionUpdated,
			check: func(t *testing.T, st, o *domain.Object) {
				require.NotNil(t, o.Metadata.DeletionTimestamp)
				require.True(t, o.Metadata.DeletionTimestamp.Equal(testNow))
				require.Equal(t, []string{"rezuscloud.io/destroy"}, o.Metadata.Finalizers)
				require.Equal(t, st.Spec, o.Spec)
			},
		},
		{
			name:       "dependents hold a deletion back even without finalizers",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			dependents: 3,
			wantType:   "TenantDeletionRequested",
			wantAction: domain.ActionUpdated,
			check: func(t *testing.T, st, o *domain.Object) {
				require.NotNil(t, o.Metadata.DeletionTimestamp)
			},
		},
		{
			name:  "deleting a terminating object again does nothing",
			state: func(t *testing.T) *domain.Object { return tenantState(t, terminating("rezuscloud.io/destroy")) },
		},
		{
			name:       "deleting a terminating object with dependents again does nothing",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, terminating()) },
			dependents: 1,
		},
		{
			name:       "deleting a terminating object with nothing holding it back finishes the deletion",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, terminating()) },
			wantType:   "TenantDeleted",
			wantAction: domain.ActionDeleted,
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, st.Metadata.DeletionTimestamp, o.Metadata.DeletionTimestamp, "the first deletion time is kept")
			},
		},
		{
			name:       "not found",
			state:      func(t *testing.T) *domain.Object { return nil },
			wantReason: domain.ReasonNotFound,
		},
		{
			name:       "stale expected version",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			expected:   "1",
			wantReason: domain.ReasonConflict,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.state(t)
			ref := tc.ref
			if ref.Kind == "" {
				ref = refOf("Tenant", "", "t1")
			}
			before := snapshot(st)
			cmd := command(domain.OpDelete, ref, nil)
			cmd.Dependents = tc.dependents
			cmd.ExpectedVersion = tc.expected
			evs, err := domain.Decide(st, cmd)
			require.Equal(t, before, st, "Decide must not modify the state")
			if tc.wantReason != "" {
				require.Equal(t, tc.wantReason, domain.ReasonOf(err), "error: %v", err)
				require.Empty(t, evs)
				return
			}
			require.NoError(t, err)
			if tc.wantType == "" {
				require.Empty(t, evs)
				return
			}
			require.Len(t, evs, 1)
			requireEvent(t, evs[0], tc.wantType, tc.wantAction)
			o := evs[0].Object
			require.Equal(t, st.Metadata.UID, o.Metadata.UID)
			require.Equal(t, st.Metadata.Generation, o.Metadata.Generation)
			if tc.check != nil {
				tc.check(t, st, o)
			}
		})
	}
}
