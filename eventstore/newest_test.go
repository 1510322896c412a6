package eventstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// tail is the last n of s (all of s when shorter).
func tail[T any](s []T, n int) []T {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func TestReplayNewest(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)

	// 1 tenant a, 2 tenant b, 3..32 ng a/g0..g29, 33 ng b/w, 34..43 ng a/h0..h9, 44 tenant c.
	mustExecute(t, ctx, env.Store, createCmd(tenantRef("a"), "ua"))
	mustExecute(t, ctx, env.Store, createCmd(tenantRef("b"), "ub"))
	for i := range 30 {
		mustExecute(t, ctx, env.Store, createCmd(nodeGroupRef("a", fmt.Sprintf("g%d", i)), fmt.Sprintf("ug%d", i)))
	}
	mustExecute(t, ctx, env.Store, createCmd(nodeGroupRef("b", "w"), "ubw"))
	for i := range 10 {
		mustExecute(t, ctx, env.Store, createCmd(nodeGroupRef("a", fmt.Sprintf("h%d", i)), fmt.Sprintf("uh%d", i)))
	}
	mustExecute(t, ctx, env.Store, createCmd(tenantRef("c"), "uc"))
	require.Equal(t, uint64(44), lastSeq(t, ctx, env.Store))
	at := func(seq uint64) time.Time { return storedAt(t, ctx, env, eventstore.StreamName, seq) }
	ng := domain.MustKind("NodeGroup")
	tenants := []string{domain.SubjectFilter(domain.TenantKind, "", "")}

	tests := []struct {
		name   string
		w      eventstore.Window
		subs   []string
		newest int
		want   []uint64
		// rounds is how many backwards reads it takes (ranges of n, 4n, 16n, …).
		rounds int
	}{
		{name: "fewer than N", newest: 100, want: seqRange(1, 44), rounds: 1},
		{name: "exactly N", newest: 44, want: seqRange(1, 44), rounds: 1},
		{name: "more than N", newest: 5, want: seqRange(40, 44), rounds: 1},
		{name: "one", newest: 1, want: []uint64{44}, rounds: 1},
		{name: "a rare filter takes several rounds", subs: tenants, newest: 3, want: []uint64{1, 2, 44}, rounds: 3},
		{name: "a rare filter, fewer than N", subs: tenants, newest: 10, want: []uint64{1, 2, 44}, rounds: 2},
		{name: "a rare filter found at once", subs: tenants, newest: 1, want: []uint64{44}, rounds: 1},
		{name: "a rare filter, a round finds more than needed", subs: tenants, newest: 2, want: []uint64{2, 44}, rounds: 4},
		{name: "one object deep in the stream", subs: []string{domain.SubjectFilter(ng, "b", "w")}, newest: 1, want: []uint64{33}, rounds: 3},
		{name: "a tenant's events", subs: []string{domain.SubjectFilter(ng, "a", ""), domain.SubjectFilter(domain.TenantKind, "", "a")},
			newest: 12, want: append([]uint64{31, 32}, seqRange(34, 43)...), rounds: 2},
		{name: "several subjects", subs: []string{domain.SubjectFilter(ng, "b", ""), domain.SubjectFilter(domain.TenantKind, "", "c")},
			newest: 5, want: []uint64{33, 44}, rounds: 3},
		{name: "no match reads back to the start", subs: []string{domain.SubjectFilter(ng, "zzz", "")}, newest: 2, want: []uint64{}, rounds: 4},
		{name: "bounded by since: stops at it", w: eventstore.Window{From: eventstore.Position{After: 2}}, subs: tenants, newest: 3, want: []uint64{44}, rounds: 3},
		{name: "bounded by until", w: eventstore.Window{UntilSeq: 43}, subs: tenants, newest: 3, want: []uint64{1, 2}, rounds: 3},
		{name: "until, unfiltered", w: eventstore.Window{UntilSeq: 10}, newest: 3, want: []uint64{8, 9, 10}, rounds: 1},
		{name: "until past the last", w: eventstore.Window{UntilSeq: 1 << 40}, newest: 2, want: []uint64{43, 44}, rounds: 1},
		{name: "since and until", w: eventstore.Window{From: eventstore.Position{After: 5}, UntilSeq: 10}, newest: 10, want: seqRange(6, 10), rounds: 1},
		{name: "since a time", w: eventstore.Window{From: eventstore.Position{Time: at(40)}}, newest: 10, want: seqRange(40, 44), rounds: 1},
		{name: "until a time", w: eventstore.Window{Until: at(10)}, newest: 3, want: []uint64{8, 9, 10}, rounds: 1},
		{name: "between two times", w: eventstore.Window{From: eventstore.Position{Time: at(4)}, Until: at(6)}, newest: 2, want: []uint64{5, 6}, rounds: 1},
		{name: "until a time before the first", w: eventstore.Window{Until: at(1).Add(-time.Nanosecond)}, newest: 2, want: []uint64{}, rounds: 0},
		{name: "since the last", w: eventstore.Window{From: eventstore.Position{After: 44}}, newest: 2, want: []uint64{}, rounds: 0},
		{name: "since after the last", w: eventstore.Window{From: eventstore.Position{After: 1 << 40}}, newest: 2, want: []uint64{}, rounds: 0},
		{name: "since a time after the last", w: eventstore.Window{From: eventstore.Position{Time: at(44).Add(time.Nanosecond)}}, newest: 2, want: []uint64{}, rounds: 0},
		{name: "since after until", w: eventstore.Window{From: eventstore.Position{After: 10}, UntilSeq: 5}, newest: 2, want: []uint64{}, rounds: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := eventstore.ReplayOptions{Window: tt.w, Subjects: tt.subs, Newest: tt.newest}
			recs, rounds, err := env.Store.ReplayNewestRounds(ctx, opts)
			require.NoError(t, err)
			require.Equal(t, tt.want, seqsOf(recs))
			require.Equal(t, tt.rounds, rounds, "backwards rounds")

			// The same as reading the whole window forwards and keeping the tail.
			all, _, err := env.Store.Replay(ctx, eventstore.ReplayOptions{Window: tt.w, Subjects: tt.subs, Limit: 10000})
			require.NoError(t, err)
			require.Equal(t, tail(seqsOf(all), tt.newest), seqsOf(recs))

			// Replay with Newest answers the same, never with more.
			got, more, err := env.Store.Replay(ctx, opts)
			require.NoError(t, err)
			require.False(t, more)
			require.Equal(t, tt.want, seqsOf(got))
			for _, r := range got {
				stored, err := env.Store.Get(ctx, r.Seq)
				require.NoError(t, err)
				require.Equal(t, stored.Subject, r.Subject)
				require.Equal(t, stored.Event, r.Event)
			}
		})
	}

	t.Run("newest must not be negative", func(t *testing.T) {
		_, _, err := env.Store.Replay(ctx, eventstore.ReplayOptions{Newest: -1, Limit: 10})
		require.Error(t, err)
	})

	t.Run("a newest replay leaves no consumer behind", func(t *testing.T) {
		st, err := env.Store.JetStream().Stream(ctx, eventstore.StreamName)
		require.NoError(t, err)
		eventuallyNoConsumers(t, ctx, st)
	})
}

func TestReplayNewestOfAnEmptyStream(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	tests := []struct {
		name string
		opts eventstore.ReplayOptions
	}{
		{name: "everything", opts: eventstore.ReplayOptions{Newest: 10}},
		{name: "filtered", opts: eventstore.ReplayOptions{Subjects: []string{domain.SubjectFilter(domain.TenantKind, "", "")}, Newest: 1}},
		{name: "until", opts: eventstore.ReplayOptions{Window: eventstore.Window{UntilSeq: 5, Until: time.Now()}, Newest: 1}},
		{name: "since", opts: eventstore.ReplayOptions{Window: eventstore.Window{From: eventstore.Position{Time: time.Now().Add(-time.Hour)}}, Newest: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, rounds, err := env.Store.ReplayNewestRounds(ctx, tt.opts)
			require.NoError(t, err)
			require.Empty(t, recs)
			require.Zero(t, rounds)
		})
	}
}

func TestAuditQueryNewest(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	l := openAudit(t, ctx, env, eventstore.AuditConfig{})

	// bob changes node groups of acme (odd) and globex (even), except:
	// 2 alice, 7 alice on the Tenant acme, 20 bob on the Tenant globex,
	// 30 carol, 35 alice downloads acme's kubeconfig.
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := 1; i <= 40; i++ {
		r := eventstore.AuditRecord{Time: base.Add(time.Duration(i) * time.Second), Actor: "bob", Role: "edit", Method: "PATCH",
			Kind: "NodeGroup", Tenant: "acme", Name: "w", Code: 200, RequestID: fmt.Sprintf("req-%d", i)}
		if i%2 == 0 {
			r.Tenant = "globex"
		}
		switch i {
		case 2:
			r.Actor = "alice"
		case 7:
			r.Actor, r.Kind, r.Tenant, r.Name = "alice", "Tenant", "acme", "acme"
		case 20:
			r.Kind, r.Name = "Tenant", "globex"
		case 30:
			r.Actor = "carol"
		case 35:
			r.Actor, r.Method, r.Kind, r.Name = "alice", "GET", "Kubeconfig", ""
		}
		r.Path = fmt.Sprintf("/api/v1/x/%d", i)
		l.Append(r)
		// One at a time, so stream order is append order.
		require.NoError(t, l.Flush(ctx))
	}
	at := func(seq uint64) time.Time { return storedAt(t, ctx, env, eventstore.AuditStreamName, seq) }

	tests := []struct {
		name   string
		q      eventstore.AuditQuery
		want   []uint64
		rounds int
	}{
		{name: "fewer than N", q: eventstore.AuditQuery{Newest: 50}, want: seqRange(1, 40), rounds: 1},
		{name: "exactly N", q: eventstore.AuditQuery{Newest: 40}, want: seqRange(1, 40), rounds: 1},
		{name: "the newest 3", q: eventstore.AuditQuery{Newest: 3}, want: []uint64{38, 39, 40}, rounds: 1},
		{name: "an actor: several rounds", q: eventstore.AuditQuery{Actor: "alice", Newest: 2}, want: []uint64{7, 35}, rounds: 3},
		{name: "an actor, fewer than N", q: eventstore.AuditQuery{Actor: "alice", Newest: 10}, want: []uint64{2, 7, 35}, rounds: 2},
		{name: "an actor found in the third round", q: eventstore.AuditQuery{Actor: "carol", Newest: 1}, want: []uint64{30}, rounds: 3},
		{name: "an actor who did nothing", q: eventstore.AuditQuery{Actor: "mallory", Newest: 5}, want: []uint64{}, rounds: 3},
		{name: "a kind", q: eventstore.AuditQuery{Kind: "tenants", Newest: 5}, want: []uint64{7, 20}, rounds: 3},
		{name: "a tenant and an actor", q: eventstore.AuditQuery{Tenant: "acme", Actor: "alice", Newest: 5}, want: []uint64{7, 35}, rounds: 3},
		{name: "a kind and an actor", q: eventstore.AuditQuery{Kind: "kubeconfig", Actor: "alice", Newest: 5}, want: []uint64{35}, rounds: 3},
		{name: "a tenant", q: eventstore.AuditQuery{Tenant: "globex", Newest: 3}, want: []uint64{36, 38, 40}, rounds: 2},
		{name: "bounded by since", q: eventstore.AuditQuery{Window: eventstore.Window{From: eventstore.Position{After: 10}}, Actor: "alice", Newest: 5}, want: []uint64{35}, rounds: 3},
		{name: "bounded by until", q: eventstore.AuditQuery{Window: eventstore.Window{UntilSeq: 34}, Actor: "alice", Newest: 5}, want: []uint64{2, 7}, rounds: 3},
		{name: "older page: until the first returned - 1", q: eventstore.AuditQuery{Window: eventstore.Window{UntilSeq: 37}, Newest: 3}, want: []uint64{35, 36, 37}, rounds: 1},
		{name: "since and until", q: eventstore.AuditQuery{Window: eventstore.Window{From: eventstore.Position{After: 5}, UntilSeq: 20}, Newest: 3}, want: []uint64{18, 19, 20}, rounds: 1},
		{name: "since a time", q: eventstore.AuditQuery{Window: eventstore.Window{From: eventstore.Position{Time: at(36)}}, Newest: 10}, want: seqRange(36, 40), rounds: 1},
		{name: "until a time", q: eventstore.AuditQuery{Window: eventstore.Window{Until: at(5)}, Newest: 2}, want: []uint64{4, 5}, rounds: 1},
		{name: "until a time, an actor", q: eventstore.AuditQuery{Window: eventstore.Window{Until: at(34)}, Actor: "alice", Newest: 1}, want: []uint64{7}, rounds: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rounds, err := l.QueryNewestRounds(ctx, tt.q)
			require.NoError(t, err)
			require.Equal(t, tt.want, auditSeqs(got))
			require.Equal(t, tt.rounds, rounds, "backwards rounds")
			for _, r := range got {
				require.Equal(t, fmt.Sprintf("req-%d", r.Seq), r.RequestID)
				require.Equal(t, fmt.Sprintf("/api/v1/x/%d", r.Seq), r.Path)
			}

			// The same as reading the whole window forwards and keeping the tail.
			fwd := tt.q
			fwd.Newest, fwd.Limit = 0, 10000
			all, _, err := l.Query(ctx, fwd)
			require.NoError(t, err)
			require.Equal(t, tail(auditSeqs(all), tt.q.Newest), auditSeqs(got))

			viaQuery, more, err := l.Query(ctx, tt.q)
			require.NoError(t, err)
			require.False(t, more)
			require.Equal(t, tt.want, auditSeqs(viaQuery))
		})
	}

	t.Run("newest must not be negative", func(t *testing.T) {
		_, _, err := l.Query(ctx, eventstore.AuditQuery{Newest: -1, Limit: 10})
		require.Error(t, err)
	})

	t.Run("a newest query leaves no consumer behind", func(t *testing.T) {
		st, err := env.Store.JetStream().Stream(ctx, eventstore.AuditStreamName)
		require.NoError(t, err)
		eventuallyNoConsumers(t, ctx, st)
	})
}

func TestAuditQueryNewestOfAnEmptyLog(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	l := openAudit(t, ctx, env, eventstore.AuditConfig{})
	for _, q := range []eventstore.AuditQuery{{Newest: 10}, {Actor: "alice", Newest: 1}, {Kind: "tenants", Window: eventstore.Window{UntilSeq: 3}, Newest: 1}} {
		got, rounds, err := l.QueryNewestRounds(ctx, q)
		require.NoError(t, err)
		require.Empty(t, got)
		require.Zero(t, rounds)
		got, more, err := l.Query(ctx, q)
		require.NoError(t, err)
		require.Empty(t, got)
		require.NotNil(t, got, "an empty answer is an empty list")
		require.False(t, more)
	}
}

func seqRange(from, to uint64) []uint64 {
	out := []uint64{}
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}
