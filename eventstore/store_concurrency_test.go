package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func TestConcurrentWritersWithTheSameExpectedVersion(t *testing.T) {
	t.Parallel()
	const writers = 50
	env := eventstoretest.Start(t)
	ctx := testCtx(t)

	tests := []struct {
		name string
		// write is what writer i does, given the state all writers read.
		write func(ctx context.Context, base eventstore.Result, i int) (uint64, error)
		// storeConflicts is true when every loser is refused by JetStream (not by Decide).
		storeConflicts bool
	}{
		{
			name:           "Append",
			storeConflicts: true,
			write: func(ctx context.Context, base eventstore.Result, i int) (uint64, error) {
				obj := base.Object.DeepCopy()
				obj.Metadata.ResourceVersion = ""
				obj.Metadata.Labels = map[string]string{"writer": strconv.Itoa(i)}
				ev := domain.Event{Type: "TenantUpdated", Action: domain.ActionUpdated, Actor: "test", Time: now, Object: obj}
				seq, dup, err := env.Store.Append(ctx, base.Object.Ref(), base.Seq, "", ev)
				if dup {
					return 0, errors.New("an append without a message id is never a duplicate")
				}
				return seq, err
			},
		},
		{
			name: "Update with ExpectedVersion and no retries",
			write: func(ctx context.Context, base eventstore.Result, i int) (uint64, error) {
				cmd := labelCmd(base.Object, "writer", strconv.Itoa(i), base.Object.Metadata.ResourceVersion)
				res, err := env.Store.Update(ctx, cmd.Ref, eventstore.UpdateOptions{Retries: 0}, func(state *domain.Object) ([]domain.Event, error) {
					return domain.Decide(state, cmd)
				})
				return res.Seq, err
			},
		},
	}
	for n, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := tenantRef(fmt.Sprintf("race%d", n))
			base := mustExecute(t, ctx, env.Store, createCmd(ref, "uid"))
			before := lastSeq(t, ctx, env.Store)
			conflictsBefore := env.Store.Conflicts()

			start := make(chan struct{})
			seqs := make([]uint64, writers)
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					<-start
					seqs[i], errs[i] = tt.write(ctx, base, i)
				})
			}
			close(start)
			wg.Wait()

			winner := -1
			conflicts := 0
			for i, err := range errs {
				switch {
				case err == nil:
					require.Equal(t, -1, winner, "writers %d and %d both succeeded with the same expected version", winner, i)
					winner = i
				case domain.IsConflict(err):
					conflicts++
				default:
					require.NoError(t, err, "writer %d failed with something other than a conflict", i)
				}
			}
			require.NotEqual(t, -1, winner, "no writer succeeded")
			require.Equal(t, writers-1, conflicts)
			require.Equal(t, before+1, seqs[winner])
			require.Equal(t, before+1, lastSeq(t, ctx, env.Store), "exactly one new event")
			if tt.storeConflicts {
				require.Equal(t, conflictsBefore+writers-1, env.Store.Conflicts(), "JetStream refused every loser")
			}

			rec, err := env.Store.Load(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, seqs[winner], rec.Seq)
			require.Equal(t, strconv.Itoa(winner), rec.State().Metadata.Labels["writer"], "the stored event is the winner's")
		})
	}
}

func TestUpdateRetriesLoseNoUpdate(t *testing.T) {
	t.Parallel()
	const writers = 20
	env := eventstoretest.Start(t)
	ctx := testCtx(t)

	tests := []struct {
		name    string
		retries int
		// allSucceed: with writers-1 retries a writer can lose at most once to
		// each other writer, so none runs out; with fewer, a lockstep burst can
		// exhaust a writer's retries (a 409, as Kubernetes gives after 5).
		allSucceed bool
	}{
		{name: "5 retries, as PATCH uses", retries: 5},
		{name: "a retry per competitor", retries: writers - 1, allSucceed: true},
	}
	for n, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := tenantRef(fmt.Sprintf("busy%d", n))
			created := mustExecute(t, ctx, env.Store, createCmd(ref, "uid"))

			start := make(chan struct{})
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					<-start
					key := fmt.Sprintf("k%02d", i)
					// A patch: re-read on every attempt, add one label, no resourceVersion.
					_, errs[i] = env.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: tt.retries}, func(state *domain.Object) ([]domain.Event, error) {
						if state == nil {
							return nil, domain.NewNotFound("Tenant", ref.Name)
						}
						return domain.Decide(state, labelCmd(state, key, "v", ""))
					})
				})
			}
			close(start)
			wg.Wait()

			rec, err := env.Store.Load(ctx, ref)
			require.NoError(t, err)
			labels := rec.State().Metadata.Labels
			succeeded := 0
			for i, err := range errs {
				key := fmt.Sprintf("k%02d", i)
				if err == nil {
					succeeded++
					require.Equal(t, "v", labels[key], "writer %d succeeded but its label was lost", i)
					continue
				}
				require.True(t, domain.IsConflict(err), "writer %d: %v", i, err)
				require.False(t, tt.allSucceed, "writer %d ran out of retries: %v", i, err)
				require.NotContains(t, labels, key, "writer %d failed but its label was stored", i)
			}
			t.Logf("%d of %d writers succeeded with %d retries", succeeded, writers, tt.retries)
			require.Len(t, labels, succeeded, "labels: %v", labels)
			require.GreaterOrEqual(t, succeeded, tt.retries+1, "every round of retries lets at least one writer through")
			require.Equal(t, created.Seq+uint64(succeeded), rec.Seq, "one event per successful writer, none wasted")
			require.Equal(t, rec.Seq, lastSeq(t, ctx, env.Store))
		})
	}
}
