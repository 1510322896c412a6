package eventstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

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
