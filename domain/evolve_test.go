package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestEvolve(t *testing.T) {
	created, err := domain.Decide(nil, command(domain.OpCreate, refOf("NodeGroup", "t1", "workers"), func() *domain.Object {
		o := newObject("NodeGroup", workerSpec)
		o.Metadata.Labels = map[string]string{"a": "b"}
		o.Metadata.Annotations = map[string]string{"c": "d"}
		o.Metadata.Finalizers = []string{"rezuscloud.io/drain"}
		return o
	}()))
	require.NoError(t, err)
	require.Len(t, created, 1)

	t.Run("sets resourceVersion to the sequence", func(t *testing.T) {
		tests := []struct {
			seq  uint64
			want string
		}{{1, "1"}, {42, "42"}, {18446744073709551615, "18446744073709551615"}}
		for _, tc := range tests {
			st := domain.Evolve(nil, &created[0], tc.seq)
			require.NotNil(t, st)
			require.Equal(t, tc.want, st.Metadata.ResourceVersion)
			require.Empty(t, created[0].Object.Metadata.ResourceVersion, "the event is not changed")
		}
	})

	t.Run("returns nil for Deleted", func(t *testing.T) {
		st := domain.Evolve(nil, &created[0], 3)
		evs, err := domain.Decide(st, command(domain.OpUpdate, refOf("NodeGroup", "t1", "workers"), func() *domain.Object {
			b := bodyOf(st)
			b.Metadata.Finalizers = nil
			return b
		}()))
		require.NoError(t, err)
		require.Len(t, evs, 1)
		st = domain.Evolve(st, &evs[0], 4)
		evs, err = domain.Decide(st, command(domain.OpDelete, refOf("NodeGroup", "t1", "workers"), nil))
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, domain.ActionDeleted, evs[0].Action)
		require.Nil(t, domain.Evolve(st, &evs[0], 5))
	})

	t.Run("does not alias the event's object", func(t *testing.T) {
		ev := created[0]
		want := ev.Object.DeepCopy()
		st := domain.Evolve(nil, &ev, 1)
		st.Metadata.Labels["a"] = "changed"
		st.Metadata.Annotations["c"] = "changed"
		st.Metadata.Finalizers[0] = "changed"
		*st.Metadata.CreationTimestamp = st.Metadata.CreationTimestamp.Add(time.Hour)
		for i := range st.Spec {
			st.Spec[i] = ' '
		}
		st.Metadata.Name = "changed"
		require.Equal(t, want, ev.Object)
	})

	t.Run("a whole life", func(t *testing.T) {
		ref := refOf("Tenant", "", "life")
		var st *domain.Object
		var seq uint64
		apply := func(cmd domain.Command, wantType string) {
			t.Helper()
			evs, err := domain.Decide(st, cmd)
			require.NoError(t, err)
			require.Len(t, evs, 1)
			require.Equal(t, wantType, evs[0].Type)
			seq++
			st = domain.Evolve(st, &evs[0], seq)
		}
		in := newObject("Tenant", `{}`)
		in.Metadata.Finalizers = []string{"rezuscloud.io/destroy"}
		apply(command(domain.OpCreate, ref, in), "TenantCreated")
		require.Equal(t, "1", st.Metadata.ResourceVersion)

		up := bodyOf(st)
		up.Spec = json.RawMessage(`{"kubernetesVersion":"1.36.1"}`)
		cmd := command(domain.OpUpdate, ref, up)
		cmd.ExpectedVersion = "1"
		apply(cmd, "TenantUpdated")
		require.Equal(t, int64(2), st.Metadata.Generation)

		// The old version is now stale.
		cmd.ExpectedVersion = "1"
		_, err := domain.Decide(st, cmd)
		require.True(t, domain.IsConflict(err))

		apply(command(domain.OpDelete, ref, nil), "TenantDeletionRequested")
		require.True(t, st.Terminating())
		require.Equal(t, "3", st.Metadata.ResourceVersion)

		done := bodyOf(st)
		done.Metadata.Finalizers = nil
		evs, err := domain.Decide(st, command(domain.OpUpdate, ref, done))
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, "TenantDeleted", evs[0].Type)
		require.Nil(t, domain.Evolve(st, &evs[0], 4))
	})
}
