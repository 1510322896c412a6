package eventstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// storedAt is the time JetStream stored the message with sequence seq.
func storedAt(t *testing.T, ctx context.Context, env *eventstoretest.Env, stream string, seq uint64) time.Time {
	t.Helper()
	st, err := env.Store.JetStream().Stream(ctx, stream)
	require.NoError(t, err)
	msg, err := st.GetMsg(ctx, seq)
	require.NoError(t, err)
	return msg.Time
}

func seqsOf(recs []*eventstore.Record) []uint64 {
	out := []uint64{}
	for _, r := range recs {
		out = append(out, r.Seq)
	}
	return out
}

func TestReplay(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)

	// 1 tenant a, 2 tenant b, 3 ng a/w, 4 ng a/x, 5 ng b/w, 6 a/w label, 7 a/w label, 8 a/w deleted, 9 tenant c.
	mustExecute(t, ctx, env.Store, createCmd(tenantRef("a"), "ua"))
	mustExecute(t, ctx, env.Store, createCmd(tenantRef("b"), "ub"))
	w := mustExecute(t, ctx, env.Store, createCmd(nodeGroupRef("a", "w"), "uaw"))
	mustExecute(t, ctx, env.Store, createCmd(nodeGroupRef("a", "x"), "uax"))
	mustExecute(t, ctx, env.Store, createCmd(nodeGroupRef("b", "w"), "ubw"))
	w = mustExecute(t, ctx, env.Store, labelCmd(w.Object, "k1", "v", ""))
	mustExecute(t, ctx, env.Store, labelCmd(w.Object, "k2", "v", ""))
	mustExecute(t, ctx, env.Store, deleteCmd(nodeGroupRef("a", "w")))
	mustExecute(t, ctx, env.Store, createCmd(tenantRef("c"), "uc"))
	require.Equal(t, uint64(9), lastSeq(t, ctx, env.Store))
	at4 := storedAt(t, ctx, env, eventstore.StreamName, 4)
	at6 := storedAt(t, ctx, env, eventstore.StreamName, 6)
	ng := domain.MustKind("NodeGroup")

	tests := []struct {
		name     string
		opts     eventstore.ReplayOptions
		want     []uint64
		wantMore bool
	}{
		{name: "from the start", opts: eventstore.ReplayOptions{Limit: 100}, want: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{name: "after a sequence", opts: eventstore.ReplayOptions{Window: eventstore.Window{From: eventstore.Position{After: 6}}, Limit: 100}, want: []uint64{7, 8, 9}},
		{name: "after the last", opts: eventstore.ReplayOptions{Window: eventstore.Window{From: eventstore.Position{After: 9}}, Limit: 100}, want: []uint64{}},
		{name: "far after the last", opts: eventstore.ReplayOptions{Window: eventstore.Window{From: eventstore.Position{After: 1 << 40}}, Limit: 100}, want: []uint64{}},
		{name: "from a time", opts: eventstore.ReplayOptions{Window: eventstore.Window{From: eventstore.Position{Time: at4}}, Limit: 100}, want: []uint64{4, 5, 6, 7, 8, 9}},
		{name: "a time wins over a sequence", opts: eventstore.ReplayOptions{Window: eventstore.Window{From: eventstore.Position{After: 8, Time: at4}}, Limit: 100}, want: []uint64{4, 5, 6, 7, 8, 9}},
		{name: "until a sequence", opts: eventstore.ReplayOptions{Window: eventstore.Window{From: eventstore.Position{After: 2}, UntilSeq: 5}, Limit: 100}, want: []uint64{3, 4, 5}},
		{name: "until a time", opts: eventstore.ReplayOptions{Window: eventstore.Window{Until: at6}, Limit: 100}, want: []uint64{1, 2, 3, 4, 5, 6}},
		{name: "between two times", opts: eventstore.ReplayOptions{Window: eventstore.Window{From: eventstore.Position{Time: at4}, Until: at6}, Limit: 100}, want: []uint64{4, 5, 6}},
		{name: "limit leaves more", opts: eventstore.ReplayOptions{Limit: 4}, want: []uint64{1, 2, 3, 4}, wantMore: true},
		{name: "limit at the end leaves none", opts: eventstore.ReplayOptions{Limit: 9}, want: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{name: "an object's whole history", opts: eventstore.ReplayOptions{Subjects: []string{domain.SubjectFilter(ng, "a", "w")}, Limit: 100}, want: []uint64{3, 6, 7, 8}},
		{name: "a kind in a tenant", opts: eventstore.ReplayOptions{Subjects: []string{domain.SubjectFilter(ng, "a", "")}, Limit: 100}, want: []uint64{3, 4, 6, 7, 8}},
		{name: "a kind", opts: eventstore.ReplayOptions{Subjects: []string{domain.SubjectFilter(domain.TenantKind, "", "")}, Limit: 100}, want: []uint64{1, 2, 9}},
		{name: "filtered with more", opts: eventstore.ReplayOptions{Subjects: []string{domain.SubjectFilter(ng, "", "")}, Limit: 2}, want: []uint64{3, 4}, wantMore: true},
		{name: "filtered, limit at the last match", opts: eventstore.ReplayOptions{Subjects: []string{domain.SubjectFilter(ng, "", "")}, Limit: 6}, want: []uint64{3, 4, 5, 6, 7, 8}},
		{name: "no match", opts: eventstore.ReplayOptions{Subjects: []string{domain.SubjectFilter(ng, "zzz", "")}, Limit: 100}, want: []uint64{}},
		{name: "several subjects", opts: eventstore.ReplayOptions{Subjects: []string{
			domain.SubjectFilter(ng, "b", ""), domain.SubjectFilter(domain.TenantKind, "", "c")}, Limit: 100}, want: []uint64{5, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, more, err := env.Store.Replay(ctx, tt.opts)
			require.NoError(t, err)
			require.Equal(t, tt.want, seqsOf(recs))
			require.Equal(t, tt.wantMore, more)
			for _, r := range recs {
				stored, err := env.Store.Get(ctx, r.Seq)
				require.NoError(t, err)
				require.Equal(t, stored.Subject, r.Subject)
				require.Equal(t, stored.Event, r.Event)
			}
		})
	}

	t.Run("the history reads create, updates, delete", func(t *testing.T) {
		recs, _, err := env.Store.Replay(ctx, eventstore.ReplayOptions{Subjects: []string{domain.SubjectFilter(ng, "a", "w")}, Limit: 100})
		require.NoError(t, err)
		var actions []domain.Action
		for _, r := range recs {
			actions = append(actions, r.Event.Action)
		}
		require.Equal(t, []domain.Action{domain.ActionCreated, domain.ActionUpdated, domain.ActionUpdated, domain.ActionDeleted}, actions)
	})

	t.Run("limit must be positive", func(t *testing.T) {
		_, _, err := env.Store.Replay(ctx, eventstore.ReplayOptions{})
		require.Error(t, err)
	})

	t.Run("a replay leaves no consumer behind", func(t *testing.T) {
		st, err := env.Store.JetStream().Stream(ctx, eventstore.StreamName)
		require.NoError(t, err)
		eventuallyNoConsumers(t, ctx, st)
	})
}

// eventuallyNoConsumers waits until the stream has no consumers: scans
// delete theirs when they return.
func eventuallyNoConsumers(t *testing.T, ctx context.Context, st jetstream.Stream) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		info, err := st.Info(ctx)
		require.NoError(c, err)
		assert.Zero(c, info.State.Consumers, "consumers left on the stream")
	}, 10*time.Second, 5*time.Millisecond)
}

func TestFollowFrom(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// from is where to start, given the times events 1..3 were stored.
		from func(stored []time.Time) eventstore.Position
		// want is what comes before the event appended while following (4).
		want []uint64
	}{
		{name: "from the start", from: func([]time.Time) eventstore.Position { return eventstore.Position{} }, want: []uint64{1, 2, 3}},
		{name: "after a sequence", from: func([]time.Time) eventstore.Position { return eventstore.Position{After: 2} }, want: []uint64{3}},
		{name: "after the last", from: func([]time.Time) eventstore.Position { return eventstore.Position{After: 3} }, want: nil},
		{name: "from a time", from: func(at []time.Time) eventstore.Position { return eventstore.Position{Time: at[1]} }, want: []uint64{2, 3}},
		{name: "from a time after the last", from: func(at []time.Time) eventstore.Position { return eventstore.Position{Time: at[2].Add(time.Nanosecond)} }, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := eventstoretest.Start(t)
			ctx := testCtx(t)
			var stored []time.Time
			for _, n := range []string{"a", "b", "c"} {
				res := mustExecute(t, ctx, env.Store, createCmd(tenantRef(n), "u"+n))
				stored = append(stored, storedAt(t, ctx, env, eventstore.StreamName, res.Seq))
			}
			// Not a tenant: the filter skips it.
			mustExecute(t, ctx, env.Store, createCmd(nodeGroupRef("a", "g"), "ug"))

			cur, err := env.Store.FollowFrom(ctx, tt.from(stored), []string{domain.SubjectFilter(domain.TenantKind, "", "")})
			require.NoError(t, err)
			defer cur.Stop()
			got := []uint64{}
			for range tt.want {
				rec, err := cur.Next(ctx)
				require.NoError(t, err)
				got = append(got, rec.Seq)
			}
			require.Equal(t, append([]uint64{}, tt.want...), got)

			next := make(chan *eventstore.Record, 1)
			go func() {
				if rec, err := cur.Next(ctx); err == nil {
					next <- rec
				}
			}()
			res := mustExecute(t, ctx, env.Store, createCmd(tenantRef("late"), "late"))
			rec := recv(t, next, 10*time.Second, "the event appended while following")
			require.Equal(t, res.Seq, rec.Seq)
			require.Equal(t, "late", rec.Event.Object.Metadata.Name)
		})
	}
}
