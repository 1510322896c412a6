package eventstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// A hint is a replica's read model, which may lag the stream: on another
// replica than the one whose write was acknowledged, or on the writer's own
// before its cache has applied the write. Whatever the hint says, Update
// answers as if it had loaded the aggregate from the stream: a run that
// creates a machine and records its config at once must not be told the
// machine is not found (issue 47, three replicas: "recording the config of
// machine cp-0: machine "cp-0" not found").
func TestUpdateWithALaggingHintAnswersFromTheStream(t *testing.T) {
	key := domain.AnnotationConfigHash
	// record is the config recorder's decision: the machine must exist, and
	// holding the hash already is nothing to do.
	record := func(ref domain.Ref, hash string) func(*domain.Object) ([]domain.Event, error) {
		return func(state *domain.Object) ([]domain.Event, error) {
			if state == nil {
				return nil, domain.NewNotFound(ref.Kind, ref.Name)
			}
			if state.Metadata.Annotations[key] == hash {
				return nil, nil
			}
			next := state.DeepCopy()
			if next.Metadata.Annotations == nil {
				next.Metadata.Annotations = map[string]string{}
			}
			next.Metadata.Annotations[key] = hash
			return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next, Actor: "test", Now: now})
		}
	}
	for _, tc := range []struct {
		name string
		// lag says what the hint holds: the stream's states, oldest first,
		// after the create and each hash written (nil: nothing yet).
		lag  func(states []stateHint) stateHint
		hash []string // written through the stream before the hinted update
		want string   // the hash the hinted update records
		// changes says whether the hinted update appends.
		changes bool
	}{
		{name: "the hint has not seen the create", lag: func([]stateHint) stateHint { return stateHint{} },
			want: "h1", changes: true},
		{name: "the hint has not seen the create, which holds the hash", lag: func([]stateHint) stateHint { return stateHint{} },
			hash: []string{"h1"}, want: "h1"},
		{name: "the hint holds the hash the stream has changed since",
			lag: func(s []stateHint) stateHint { return s[1] }, hash: []string{"h1", "h2"}, want: "h1", changes: true},
		{name: "the hint misses the hash the stream holds",
			lag: func(s []stateHint) stateHint { return s[0] }, hash: []string{"h1"}, want: "h1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := eventstoretest.Start(t)
			ctx := testCtx(t)
			ref := domain.Ref{Kind: domain.MachineKind.Kind, Tenant: "acme", Name: "cp-0"}
			env.Create(t, domain.MachineKind, ref.Tenant, ref.Name, `{"nodeGroup":"cp","role":"controlplane"}`)
			states := []stateHint{}
			snap := func() {
				rec, err := env.Store.Load(ctx, ref)
				require.NoError(t, err)
				states = append(states, stateHint{obj: rec.State(), seq: rec.Seq})
			}
			snap()
			for _, h := range tc.hash {
				_, err := env.Store.Update(ctx, ref, eventstore.UpdateOptions{}, record(ref, h))
				require.NoError(t, err)
				snap()
			}
			before := states[len(states)-1].seq

			res, err := env.Store.Update(ctx, ref, eventstore.UpdateOptions{Hint: tc.lag(states)}, record(ref, tc.want))
			require.NoError(t, err)
			require.Equal(t, tc.want, res.Object.Metadata.Annotations[key])
			require.Equal(t, tc.changes, res.Seq > before, "appended (seq %d, the stream's last was %d)", res.Seq, before)
			rec, err := env.Store.Load(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, tc.want, rec.State().Metadata.Annotations[key])
			require.Equal(t, res.Seq, rec.Seq)
		})
	}
}
