package eventstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// now is the injected clock of every command, so events are deterministic.
var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// testCtx bounds a test so that a hung NATS call fails it instead of the package timeout.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recv waits for one value from ch, failing the test after timeout.
func recv[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
		panic("unreachable")
	}
}

func tenantRef(name string) domain.Ref { return domain.Ref{Kind: "Tenant", Name: name} }

func nodeGroupRef(tenant, name string) domain.Ref {
	return domain.Ref{Kind: "NodeGroup", Tenant: tenant, Name: name}
}

// createCmd is a valid create of ref with the given uid.
func createCmd(ref domain.Ref, uid string) domain.Command {
	obj := &domain.Object{Metadata: domain.ObjectMeta{Name: ref.Name, Tenant: ref.Tenant}}
	if ref.Kind == "NodeGroup" {
		obj.Spec = json.RawMessage(`{"role":"worker","count":1,"provider":"local"}`)
	}
	return domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: "test", Now: now, NewUID: uid}
}

// labelCmd is an update of cur that sets one more label.
func labelCmd(cur *domain.Object, key, value, expectedVersion string) domain.Command {
	obj := cur.DeepCopy()
	obj.Metadata.ResourceVersion = ""
	if obj.Metadata.Labels == nil {
		obj.Metadata.Labels = map[string]string{}
	}
	obj.Metadata.Labels[key] = value
	return domain.Command{Op: domain.OpUpdate, Ref: cur.Ref(), Object: obj, ExpectedVersion: expectedVersion, Actor: "test", Now: now}
}

func deleteCmd(ref domain.Ref) domain.Command {
	return domain.Command{Op: domain.OpDelete, Ref: ref, Actor: "test", Now: now}
}

func mustExecute(t *testing.T, ctx context.Context, s *eventstore.Store, cmd domain.Command) eventstore.Result {
	t.Helper()
	res, err := s.Execute(ctx, cmd, eventstore.UpdateOptions{})
	require.NoError(t, err, "executing %s %s", cmd.Op, cmd.Ref)
	return res
}

func lastSeq(t *testing.T, ctx context.Context, s *eventstore.Store) uint64 {
	t.Helper()
	_, last, err := s.Bounds(ctx)
	require.NoError(t, err)
	return last
}

func TestCreateStoresOnTheAggregateSubject(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)

	// The tenant of the node group is created first, as the API would.
	mustExecute(t, ctx, env.Store, createCmd(tenantRef("acme"), "uid-acme"))

	tests := []struct {
		name        string
		ref         domain.Ref
		wantSubject string
	}{
		{name: "cluster-scoped", ref: tenantRef("globex"), wantSubject: "rezus.evt.tenant._.globex"},
		{name: "tenant-scoped", ref: nodeGroupRef("acme", "workers"), wantSubject: "rezus.evt.nodegroup.acme.workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.wantSubject, tt.ref.Subject())

			before := lastSeq(t, ctx, env.Store)
			res, err := env.Store.Execute(ctx, createCmd(tt.ref, "uid-"+tt.ref.Name), eventstore.UpdateOptions{})
			require.NoError(t, err)
			require.False(t, res.Duplicate)
			require.Equal(t, before+1, res.Seq, "a create is the next event of the stream")
			require.NotNil(t, res.Object)
			require.Equal(t, strconv.FormatUint(res.Seq, 10), res.Object.Metadata.ResourceVersion, "resourceVersion is the stream sequence")
			require.Equal(t, "uid-"+tt.ref.Name, res.Object.Metadata.UID)
			require.Equal(t, res.Object, res.Last)
			require.Len(t, res.Events, 1)
			require.Equal(t, domain.ActionCreated, res.Events[0].Action)
			require.Equal(t, tt.ref.Kind+"Created", res.Events[0].Type)

			rec, err := env.Store.Load(ctx, tt.ref)
			require.NoError(t, err)
			require.NotNil(t, rec)
			require.Equal(t, res.Seq, rec.Seq)
			require.Equal(t, tt.wantSubject, rec.Subject)
			require.Equal(t, tt.ref, rec.Event.Ref())
			require.Equal(t, res.Object, rec.State(), "the loaded state is what Execute returned")

			got, err := env.Store.Get(ctx, res.Seq)
			require.NoError(t, err)
			require.Equal(t, tt.wantSubject, got.Subject)
			require.Equal(t, res.Seq, got.Seq)
		})
	}

	t.Run("never existed", func(t *testing.T) {
		rec, err := env.Store.Load(ctx, tenantRef("nobody"))
		require.NoError(t, err)
		require.Nil(t, rec)
	})
}

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

func TestCreateDeleteCreate(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	ref := tenantRef("phoenix")

	first := mustExecute(t, ctx, env.Store, createCmd(ref, "uid-1"))

	_, err := env.Store.Execute(ctx, createCmd(ref, "uid-other"), eventstore.UpdateOptions{})
	require.True(t, domain.IsAlreadyExists(err), "create of an existing object: %v", err)

	del := mustExecute(t, ctx, env.Store, deleteCmd(ref))
	require.Nil(t, del.Object, "a deletion leaves no object")
	require.NotNil(t, del.Last)
	require.Equal(t, strconv.FormatUint(del.Seq, 10), del.Last.Metadata.ResourceVersion)
	require.Equal(t, "uid-1", del.Last.Metadata.UID)

	rec, err := env.Store.Load(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, del.Seq, rec.Seq)
	require.Equal(t, domain.ActionDeleted, rec.Event.Action)
	require.Nil(t, rec.State())

	// The aggregate's subject is not empty any more: a create expecting 0 is stale.
	ev := domain.Event{Type: "TenantCreated", Action: domain.ActionCreated, Time: now, Object: first.Object.DeepCopy()}
	_, _, err = env.Store.Append(ctx, ref, 0, "", ev)
	require.True(t, domain.IsConflict(err), "append expecting an empty subject after a deletion: %v", err)

	again, err := env.Store.Execute(ctx, createCmd(ref, "uid-2"), eventstore.UpdateOptions{})
	require.NoError(t, err)
	require.Equal(t, del.Seq+1, again.Seq, "the create expected the Deleted event's sequence")
	require.Equal(t, "uid-2", again.Object.Metadata.UID)
	require.NotEqual(t, first.Object.Metadata.UID, again.Object.Metadata.UID)
	require.Equal(t, strconv.FormatUint(again.Seq, 10), again.Object.Metadata.ResourceVersion)

	rec, err = env.Store.Load(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, again.Object, rec.State())

	_, err = env.Store.Execute(ctx, createCmd(ref, "uid-3"), eventstore.UpdateOptions{})
	require.True(t, domain.IsAlreadyExists(err), "create of the re-created object: %v", err)
}

func TestFollow(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)

	// all lists every event written, in stream order.
	type written struct {
		seq     uint64
		subject string
	}
	var all []written
	write := func(cmd domain.Command) {
		res := mustExecute(t, ctx, env.Store, cmd)
		all = append(all, written{seq: res.Seq, subject: cmd.Ref.Subject()})
	}
	write(createCmd(tenantRef("a"), "ua"))
	write(createCmd(tenantRef("b"), "ub"))
	write(createCmd(nodeGroupRef("a", "ng1"), "u1"))
	write(createCmd(nodeGroupRef("b", "ng1"), "u2"))
	write(createCmd(nodeGroupRef("a", "ng2"), "u3"))
	write(deleteCmd(nodeGroupRef("a", "ng1")))
	write(createCmd(tenantRef("c"), "uc"))
	for i, w := range all {
		require.Equal(t, uint64(i+1), w.seq)
	}
	last := all[len(all)-1].seq

	// want returns the sequences >= from whose subject is accepted.
	want := func(from uint64, accept func(subject string) bool) []uint64 {
		var out []uint64
		for _, w := range all {
			if w.seq >= from && accept(w.subject) {
				out = append(out, w.seq)
			}
		}
		return out
	}
	every := func(string) bool { return true }
	prefix := func(ps ...string) func(string) bool {
		return func(s string) bool {
			for _, p := range ps {
				if strings.HasPrefix(s, p) {
					return true
				}
			}
			return false
		}
	}

	tests := []struct {
		name     string
		from     uint64
		subjects []string
		want     []uint64
	}{
		{name: "everything from 0", from: 0, want: want(1, every)},
		{name: "everything from 1", from: 1, want: want(1, every)},
		{name: "from the middle", from: 4, want: want(4, every)},
		{name: "from the last", from: last, want: want(last, every)},
		{
			name:     "one kind in one tenant",
			subjects: []string{domain.SubjectFilter(domain.NodeGroupKind, "a", "")},
			want:     want(1, prefix("rezus.evt.nodegroup.a.")),
		},
		{
			name:     "one kind in every tenant, from the middle",
			from:     4,
			subjects: []string{domain.SubjectFilter(domain.NodeGroupKind, "", "")},
			want:     want(4, prefix("rezus.evt.nodegroup.")),
		},
		{
			name:     "cluster-scoped kind",
			subjects: []string{domain.SubjectFilter(domain.TenantKind, "a", "")},
			want:     want(1, prefix("rezus.evt.tenant._.")),
		},
		{
			name:     "one object",
			subjects: []string{domain.SubjectFilter(domain.TenantKind, "", "b")},
			want:     want(1, prefix("rezus.evt.tenant._.b")),
		},
		{
			name: "several filters",
			subjects: []string{
				domain.SubjectFilter(domain.TenantKind, "", "c"),
				domain.SubjectFilter(domain.NodeGroupKind, "b", ""),
			},
			want: want(1, prefix("rezus.evt.tenant._.c", "rezus.evt.nodegroup.b.")),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NotEmpty(t, tt.want)
			cur, err := env.Store.Follow(ctx, tt.from, tt.subjects)
			require.NoError(t, err)
			defer cur.Stop()

			var got []uint64
			for range tt.want {
				rec, err := cur.Next(ctx)
				require.NoError(t, err)
				got = append(got, rec.Seq)

				stored, err := env.Store.Get(ctx, rec.Seq)
				require.NoError(t, err)
				require.Equal(t, stored.Subject, rec.Subject, "seq %d", rec.Seq)
				require.Equal(t, stored.Event, rec.Event, "seq %d", rec.Seq)
				require.Equal(t, uint64(len(tt.want)-len(got)), rec.Pending, "pending after seq %d", rec.Seq)
			}
			require.Equal(t, tt.want, got)
		})
	}

	t.Run("follows new events", func(t *testing.T) {
		cur, err := env.Store.Follow(ctx, last+1, []string{domain.SubjectFilter(domain.TenantKind, "", "")})
		require.NoError(t, err)
		defer cur.Stop()

		type next struct {
			rec *domain.Event
			seq uint64
			err error
		}
		got := make(chan next, 1)
		go func() {
			rec, err := cur.Next(ctx)
			if err != nil {
				got <- next{err: err}
				return
			}
			got <- next{rec: rec.Event, seq: rec.Seq}
		}()
		// Not a tenant: the filter must skip it.
		mustExecute(t, ctx, env.Store, createCmd(nodeGroupRef("c", "late"), "ul"))
		res := mustExecute(t, ctx, env.Store, createCmd(tenantRef("late"), "ut"))

		n := recv(t, got, 10*time.Second, "the new event")
		require.NoError(t, n.err)
		require.Equal(t, res.Seq, n.seq)
		require.Equal(t, "late", n.rec.Object.Metadata.Name)
	})

	t.Run("Stop ends the cursor", func(t *testing.T) {
		cur, err := env.Store.Follow(ctx, 1, nil)
		require.NoError(t, err)
		_, err = cur.Next(ctx)
		require.NoError(t, err)
		cur.Stop()

		done := make(chan error, 1)
		go func() {
			for {
				if _, err := cur.Next(ctx); err != nil {
					done <- err
					return
				}
			}
		}()
		err = recv(t, done, 10*time.Second, "Next after Stop")
		require.ErrorIs(t, err, jetstream.ErrMsgIteratorClosed)
	})

	t.Run("cancelling ctx makes Next return", func(t *testing.T) {
		end := lastSeq(t, ctx, env.Store)
		cur, err := env.Store.Follow(ctx, end+1, nil)
		require.NoError(t, err)
		defer cur.Stop()

		nctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		blocked := make(chan struct{})
		go func() {
			close(blocked)
			_, err := cur.Next(nctx)
			done <- err
		}()
		<-blocked
		cancel()
		err = recv(t, done, 10*time.Second, "Next after cancel")
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestGetMissingSequenceIsGone(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	for i := range 3 {
		mustExecute(t, ctx, env.Store, createCmd(tenantRef(fmt.Sprintf("t%d", i)), "u"))
	}
	stream, err := env.Store.JetStream().Stream(ctx, eventstore.StreamName)
	require.NoError(t, err)
	require.NoError(t, stream.DeleteMsg(ctx, 2))

	tests := []struct {
		name string
		seq  uint64
	}{
		{name: "removed from the middle", seq: 2},
		{name: "just past the end", seq: 4},
		{name: "far past the end", seq: 1 << 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := env.Store.Get(ctx, tt.seq)
			require.Nil(t, rec)
			require.True(t, domain.IsGone(err), "Get(%d): %v", tt.seq, err)
		})
	}

	rec, err := env.Store.Get(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, "t2", rec.Event.Object.Metadata.Name)
}

func TestEventsSurviveARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := eventstoretest.Start(t, dir)
	ctx := testCtx(t)

	type stored struct {
		ref     domain.Ref
		subject string
		typ     string
		uid     string
	}
	bySeq := map[uint64]stored{}
	lastOf := map[domain.Ref]uint64{}
	record := func(cmd domain.Command) {
		res := mustExecute(t, ctx, env.Store, cmd)
		bySeq[res.Seq] = stored{ref: cmd.Ref, subject: cmd.Ref.Subject(), typ: res.Events[0].Type, uid: res.Last.Metadata.UID}
		lastOf[cmd.Ref] = res.Seq
	}
	const n = 12
	for i := range n / 2 {
		record(createCmd(tenantRef(fmt.Sprintf("t%d", i)), fmt.Sprintf("uid-t%d", i)))
	}
	for i := range n / 4 {
		record(createCmd(nodeGroupRef("t0", fmt.Sprintf("ng%d", i)), fmt.Sprintf("uid-ng%d", i)))
	}
	rec, err := env.Store.Load(ctx, tenantRef("t1"))
	require.NoError(t, err)
	for i := range n / 4 {
		res := mustExecute(t, ctx, env.Store, labelCmd(rec.State(), fmt.Sprintf("k%d", i), "v", ""))
		bySeq[res.Seq] = stored{ref: tenantRef("t1"), subject: tenantRef("t1").Subject(), typ: res.Events[0].Type, uid: "uid-t1"}
		lastOf[tenantRef("t1")] = res.Seq
		rec, err = env.Store.Load(ctx, tenantRef("t1"))
		require.NoError(t, err)
	}
	require.Len(t, bySeq, n)
	first, last, err := env.Store.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	require.Equal(t, uint64(n), last)

	env.Stop()
	env = eventstoretest.Start(t, dir)

	gotFirst, gotLast, err := env.Store.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, first, gotFirst)
	require.Equal(t, last, gotLast)
	for seq, want := range bySeq {
		got, err := env.Store.Get(ctx, seq)
		require.NoError(t, err, "seq %d", seq)
		require.Equal(t, seq, got.Seq)
		require.Equal(t, want.subject, got.Subject, "seq %d", seq)
		require.Equal(t, want.typ, got.Event.Type, "seq %d", seq)
		require.Equal(t, want.uid, got.Event.Object.Metadata.UID, "seq %d", seq)
	}
	for ref, seq := range lastOf {
		got, err := env.Store.Load(ctx, ref)
		require.NoError(t, err, "%s", ref)
		require.Equal(t, seq, got.Seq, "%s", ref)
		require.Equal(t, strconv.FormatUint(seq, 10), got.State().Metadata.ResourceVersion)
	}
	t1, err := env.Store.Load(ctx, tenantRef("t1"))
	require.NoError(t, err)
	require.Len(t, t1.State().Metadata.Labels, n/4)

	// Concurrency control carries on from the stored sequences.
	res, err := env.Store.Execute(ctx, labelCmd(t1.State(), "after", "restart", t1.State().Metadata.ResourceVersion), eventstore.UpdateOptions{})
	require.NoError(t, err)
	require.Equal(t, last+1, res.Seq)
	_, err = env.Store.Execute(ctx, labelCmd(t1.State(), "stale", "write", t1.State().Metadata.ResourceVersion), eventstore.UpdateOptions{})
	require.True(t, domain.IsConflict(err), "stale write after restart: %v", err)
	_, err = env.Store.Execute(ctx, createCmd(tenantRef("t0"), "again"), eventstore.UpdateOptions{})
	require.True(t, domain.IsAlreadyExists(err), "create of a restored object: %v", err)
}

func TestAppendTooLarge(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	ref := tenantRef("big")
	res := mustExecute(t, ctx, env.Store, createCmd(ref, "uid"))

	tests := []struct {
		name string
		size int
	}{
		{name: "over the stream's max message size", size: 3 << 20},
		{name: "over the server's max payload", size: eventstore.DefaultMaxPayload + 1<<20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := lastSeq(t, ctx, env.Store)
			obj := res.Object.DeepCopy()
			obj.Metadata.ResourceVersion = ""
			// Append does not validate: this is what a buggy caller could hand it.
			obj.Metadata.Annotations = map[string]string{"blob": strings.Repeat("x", tt.size)}
			ev := domain.Event{Type: "TenantUpdated", Action: domain.ActionUpdated, Time: now, Object: obj}

			var err error
			require.NotPanics(t, func() {
				_, _, err = env.Store.Append(ctx, ref, res.Seq, "big-"+tt.name, ev)
			})
			require.Error(t, err)
			require.False(t, domain.IsConflict(err), "too large is not a conflict: %v", err)
			require.Equal(t, before, lastSeq(t, ctx, env.Store), "nothing was stored")

			// The connection is still usable.
			rec, err := env.Store.Load(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, res.Seq, rec.Seq)
		})
	}

	upd := mustExecute(t, ctx, env.Store, labelCmd(res.Object, "still", "works", res.Object.Metadata.ResourceVersion))
	require.Equal(t, res.Seq+1, upd.Seq)
}

// leaseProbe runs lease holders and records who works when.
type leaseProbe struct {
	leases *eventstore.Leases
	// active counts holders inside work; max is the most ever seen at once.
	active, max atomic.Int32
	started     chan leaseStart
}

type leaseStart struct {
	holder string
	ctx    context.Context
}

func newLeaseProbe(leases *eventstore.Leases) *leaseProbe {
	return &leaseProbe{leases: leases, started: make(chan leaseStart, 64)}
}

// run starts holder on lease name; work reports its start, then returns
// workErr at once or, when nil, waits until its context ends.
func (p *leaseProbe) run(ctx context.Context, name, holder string, workErr error) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- p.leases.RunWhileHeld(ctx, name, holder, func(wctx context.Context) error {
			n := p.active.Add(1)
			defer p.active.Add(-1)
			for {
				m := p.max.Load()
				if n <= m || p.max.CompareAndSwap(m, n) {
					break
				}
			}
			p.started <- leaseStart{holder: holder, ctx: wctx}
			if workErr != nil {
				return workErr
			}
			<-wctx.Done()
			return nil
		})
	}()
	return done
}

func TestLeases(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	leases, err := eventstore.OpenLeases(ctx, env.Store, ttl)
	require.NoError(t, err)
	kv, err := env.Store.JetStream().KeyValue(ctx, eventstore.LeaseBucket)
	require.NoError(t, err)

	t.Run("one holder at a time, handed over on cancel", func(t *testing.T) {
		p := newLeaseProbe(leases)
		ctxs := map[string]context.CancelFunc{}
		dones := map[string]<-chan error{}
		for _, h := range []string{"a", "b"} {
			hctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ctxs[h] = cancel
			dones[h] = p.run(hctx, "handover", h, nil)
		}

		first := recv(t, p.started, 5*time.Second, "the first holder")
		// Hold it for well over two TTLs: renewals must keep it, and the other must wait.
		select {
		case s := <-p.started:
			t.Fatalf("%s started while %s held the lease", s.holder, first.holder)
		case <-first.ctx.Done():
			t.Fatalf("%s lost the lease it was renewing", first.holder)
		case <-time.After(5 * ttl / 2):
		}

		ctxs[first.holder]()
		require.NoError(t, recv(t, dones[first.holder], 5*time.Second, "the first holder to stop"))
		second := recv(t, p.started, 5*time.Second, "the second holder")
		require.NotEqual(t, first.holder, second.holder)

		ctxs[second.holder]()
		require.NoError(t, recv(t, dones[second.holder], 5*time.Second, "the second holder to stop"))
		require.LessOrEqual(t, p.max.Load(), int32(1), "two holders worked at once")
	})

	t.Run("work error ends RunWhileHeld and releases the lease", func(t *testing.T) {
		p := newLeaseProbe(leases)
		boom := errors.New("boom")
		errDone := p.run(ctx, "failing", "a", boom)
		require.Equal(t, "a", recv(t, p.started, 5*time.Second, "a to start").holder)
		require.ErrorIs(t, recv(t, errDone, 5*time.Second, "a to return"), boom)

		_, err := kv.Get(ctx, "failing")
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the lease was released, not left to expire")

		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		bDone := p.run(bctx, "failing", "b", nil)
		require.Equal(t, "b", recv(t, p.started, 5*time.Second, "b to take over").holder)
		cancel()
		require.NoError(t, recv(t, bDone, 5*time.Second, "b to stop"))
		require.LessOrEqual(t, p.max.Load(), int32(1))
	})

	t.Run("cancelling ctx ends a waiting holder", func(t *testing.T) {
		p := newLeaseProbe(leases)
		actx, cancelA := context.WithCancel(ctx)
		defer cancelA()
		aDone := p.run(actx, "waiting", "a", nil)
		require.Equal(t, "a", recv(t, p.started, 5*time.Second, "a to start").holder)

		bctx, cancelB := context.WithCancel(ctx)
		bDone := p.run(bctx, "waiting", "b", nil)
		cancelB()
		require.NoError(t, recv(t, bDone, 5*time.Second, "waiting b to stop"))

		cancelA()
		require.NoError(t, recv(t, aDone, 5*time.Second, "a to stop"))
		select {
		case s := <-p.started:
			t.Fatalf("%s started after its context was cancelled", s.holder)
		default:
		}
		_, err := kv.Get(ctx, "waiting")
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "a released the lease when cancelled")
	})

	t.Run("a holder that lost its lease leaves the new holder's alone", func(t *testing.T) {
		p := newLeaseProbe(leases)
		actx, cancelA := context.WithCancel(ctx)
		defer cancelA()
		aDone := p.run(actx, "stolen", "a", nil)
		a := recv(t, p.started, 5*time.Second, "a to start")

		// What happens when a's lease expired (a paused for longer than the TTL)
		// and another replica acquired it: the key is gone, then created anew.
		require.NoError(t, kv.Delete(ctx, "stolen"))
		rev, err := kv.Create(ctx, "stolen", []byte("intruder"))
		require.NoError(t, err)

		// a's next renewal fails, so its work must stop.
		select {
		case <-a.ctx.Done():
		case <-time.After(3 * ttl):
			t.Fatal("a kept working after its lease was taken")
		}

		// The intruder keeps renewing its lease; a must neither delete it nor work again.
		renew := time.NewTicker(ttl / 5)
		defer renew.Stop()
		for i := range 6 {
			<-renew.C
			select {
			case s := <-p.started:
				t.Fatalf("%s started working again while the intruder held the lease: the old holder released a lease that was no longer its own", s.holder)
			default:
			}
			next, err := kv.Update(ctx, "stolen", []byte("intruder"), rev)
			require.NoError(t, err, "renewal %d of the new holder's lease failed: the old holder released a lease that was no longer its own", i)
			rev = next
		}
		cancelA()
		require.NoError(t, recv(t, aDone, 5*time.Second, "a to stop"))
		entry, err := kv.Get(ctx, "stolen")
		require.NoError(t, err)
		require.Equal(t, "intruder", string(entry.Value()))
	})
}
