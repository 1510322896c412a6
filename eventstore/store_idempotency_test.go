package eventstore_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)

	t.Run("sequential retries", func(t *testing.T) {
		existing := mustExecute(t, ctx, env.Store, createCmd(tenantRef("upd"), "uid-upd"))
		tests := []struct {
			name string
			cmd  domain.Command
		}{
			{name: "create", cmd: createCmd(tenantRef("fresh"), "uid-fresh")},
			{name: "update", cmd: labelCmd(existing.Object, "team", "a", existing.Object.Metadata.ResourceVersion)},
			{name: "delete", cmd: deleteCmd(tenantRef("upd"))},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				opts := eventstore.UpdateOptions{MsgID: "key-" + tt.name}
				first, err := env.Store.Execute(ctx, tt.cmd, opts)
				require.NoError(t, err)
				require.False(t, first.Duplicate)
				require.Len(t, first.Events, 1)
				afterFirst := lastSeq(t, ctx, env.Store)

				second, err := env.Store.Execute(ctx, tt.cmd, opts)
				require.NoError(t, err)
				require.True(t, second.Duplicate)
				require.Equal(t, first.Seq, second.Seq)
				require.Empty(t, second.Events, "a duplicate appends nothing")
				require.Equal(t, first.Object, second.Object)
				require.Equal(t, first.Last, second.Last)
				require.Equal(t, afterFirst, lastSeq(t, ctx, env.Store), "the retry added no event")

				rec, err := env.Store.Load(ctx, tt.cmd.Ref)
				require.NoError(t, err)
				require.Equal(t, first.Seq, rec.Seq)
				require.Equal(t, opts.MsgID, rec.MsgID)
			})
		}
	})

	t.Run("concurrent creates", func(t *testing.T) {
		const racers = 2
		for round := range 5 {
			ref := tenantRef(fmt.Sprintf("twin%d", round))
			cmd := createCmd(ref, "uid-twin")
			opts := eventstore.UpdateOptions{MsgID: "create-" + ref.Name}
			before := lastSeq(t, ctx, env.Store)

			start := make(chan struct{})
			results := make([]eventstore.Result, racers)
			errs := make([]error, racers)
			var wg sync.WaitGroup
			for i := range racers {
				wg.Go(func() {
					<-start
					results[i], errs[i] = env.Store.Execute(ctx, cmd, opts)
				})
			}
			close(start)
			wg.Wait()

			dups := 0
			for i := range racers {
				require.NoError(t, errs[i], "round %d racer %d", round, i)
				require.Equal(t, before+1, results[i].Seq, "round %d racer %d", round, i)
				require.Equal(t, "uid-twin", results[i].Object.Metadata.UID)
				if results[i].Duplicate {
					dups++
				}
			}
			require.Equal(t, racers-1, dups, "round %d: exactly one racer applied the create", round)
			require.Equal(t, before+1, lastSeq(t, ctx, env.Store), "round %d: one event in total", round)
		}
	})

	t.Run("Append with the same id", func(t *testing.T) {
		ref := tenantRef("raw")
		res := mustExecute(t, ctx, env.Store, createCmd(ref, "uid-raw"))
		obj := res.Object.DeepCopy()
		obj.Metadata.ResourceVersion = ""
		obj.Metadata.Labels = map[string]string{"a": "b"}
		ev := domain.Event{Type: "TenantUpdated", Action: domain.ActionUpdated, Time: now, Object: obj}

		seq, dup, err := env.Store.Append(ctx, ref, res.Seq, "append-key", ev)
		require.NoError(t, err)
		require.False(t, dup)

		// A verbatim retry still carries the old expected sequence. JetStream checks
		// that before the message id, so the retry may come back as a conflict;
		// what must not happen is a second event.
		again, dup, err := env.Store.Append(ctx, ref, res.Seq, "append-key", ev)
		if err == nil {
			require.True(t, dup)
			require.Equal(t, seq, again)
		} else {
			require.True(t, domain.IsConflict(err), "verbatim retry: %v", err)
		}
		require.Equal(t, seq, lastSeq(t, ctx, env.Store), "the verbatim retry appended nothing")

		// A retry that re-read the aggregate is recognised by its id.
		again, dup, err = env.Store.Append(ctx, ref, seq, "append-key", ev)
		require.NoError(t, err)
		require.True(t, dup)
		require.Equal(t, seq, again)
		require.Equal(t, seq, lastSeq(t, ctx, env.Store), "the re-read retry appended nothing")
	})

	t.Run("retry after another writer", func(t *testing.T) {
		ref := tenantRef("later")
		res := mustExecute(t, ctx, env.Store, createCmd(ref, "uid-later"))
		// A patch without a resourceVersion, retried after someone else wrote, so
		// the request's event is no longer the aggregate's last.
		opts := eventstore.UpdateOptions{MsgID: "patch-key", Retries: 5}
		first, err := env.Store.Update(ctx, ref, opts, func(state *domain.Object) ([]domain.Event, error) {
			return domain.Decide(state, labelCmd(state, "mine", "x", ""))
		})
		require.NoError(t, err)
		require.False(t, first.Duplicate)
		other := mustExecute(t, ctx, env.Store, labelCmd(first.Object, "theirs", "y", first.Object.Metadata.ResourceVersion))

		// Re-decided on the new state the retry still yields an event (a second
		// label keeps it from being a no-op); JetStream's dedupe must drop it.
		second, err := env.Store.Update(ctx, ref, opts, func(state *domain.Object) ([]domain.Event, error) {
			cmd := labelCmd(state, "mine", "x", "")
			cmd.Object.Metadata.Labels["retry"] = "1"
			return domain.Decide(state, cmd)
		})
		require.NoError(t, err)
		require.True(t, second.Duplicate, "the key was applied already")
		require.Equal(t, first.Seq, second.Seq)
		require.Equal(t, other.Seq, lastSeq(t, ctx, env.Store), "the retry appended nothing")
		require.Less(t, res.Seq, first.Seq)
	})
}
