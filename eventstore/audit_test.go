package eventstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// syncBuffer is a log sink safe for the async publisher's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func openAudit(t *testing.T, ctx context.Context, env *eventstoretest.Env, cfg eventstore.AuditConfig) *eventstore.AuditLog {
	t.Helper()
	l, err := eventstore.OpenAudit(ctx, env.Store, cfg)
	require.NoError(t, err)
	return l
}

func auditSeqs(recs []eventstore.AuditRecord) []uint64 {
	out := []uint64{}
	for _, r := range recs {
		out = append(out, r.Seq)
	}
	return out
}

func TestAuditConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     eventstore.AuditConfig
		wantErr bool
	}{
		{name: "zero value", cfg: eventstore.AuditConfig{}},
		{name: "a week", cfg: eventstore.AuditConfig{Retention: 7 * 24 * time.Hour}},
		{name: "negative retention", cfg: eventstore.AuditConfig{Retention: -time.Hour}, wantErr: true},
		{name: "retention under a minute", cfg: eventstore.AuditConfig{Retention: time.Second}, wantErr: true},
		{name: "negative max pending", cfg: eventstore.AuditConfig{MaxPending: -1}, wantErr: true},
		{name: "negative ack timeout", cfg: eventstore.AuditConfig{AckTimeout: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

func TestAuditSubject(t *testing.T) {
	tests := []struct {
		name string
		rec  eventstore.AuditRecord
		want string
	}{
		{name: "tenant-scoped kind", rec: eventstore.AuditRecord{Kind: "NodeGroup", Tenant: "acme", Name: "w"}, want: "rezus.audit.nodegroup.acme"},
		{name: "a tenant is its own tenant", rec: eventstore.AuditRecord{Kind: "Tenant", Tenant: "acme", Name: "acme"}, want: "rezus.audit.tenant.acme"},
		{name: "cluster-scoped kind", rec: eventstore.AuditRecord{Kind: "Provider", Name: "p"}, want: "rezus.audit.provider._"},
		{name: "credential kind", rec: eventstore.AuditRecord{Kind: "Kubeconfig", Tenant: "acme"}, want: "rezus.audit.kubeconfig.acme"},
		{name: "no kind", rec: eventstore.AuditRecord{Path: "/api/v1/auth/login"}, want: "rezus.audit._._"},
		{name: "a wildcard in the tenant", rec: eventstore.AuditRecord{Kind: "NodeGroup", Tenant: "*"}, want: "rezus.audit.nodegroup._"},
		{name: "tokens in the tenant", rec: eventstore.AuditRecord{Kind: "NodeGroup", Tenant: "a.b.>"}, want: "rezus.audit.nodegroup._"},
		{name: "a bad kind", rec: eventstore.AuditRecord{Kind: "x y", Tenant: "acme"}, want: "rezus.audit._.acme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, eventstore.AuditSubject(&tt.rec))
		})
	}

	filters := []struct {
		kind, tenant, want string
	}{
		{"", "", "rezus.audit.*.*"},
		{"nodegroups", "", "rezus.audit.nodegroup.*"},
		{"NodeGroup", "acme", "rezus.audit.nodegroup.acme"},
		{"nodegroup", "acme", "rezus.audit.nodegroup.acme"},
		{"", "acme", "rezus.audit.*.acme"},
		{"kubeconfig", "", "rezus.audit.kubeconfig.*"},
	}
	for _, f := range filters {
		require.Equal(t, f.want, eventstore.AuditFilter(f.kind, f.tenant), "%q %q", f.kind, f.tenant)
	}
}

func TestOpenAuditProvisionsTheStream(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)

	l := openAudit(t, ctx, env, eventstore.AuditConfig{})
	require.Equal(t, eventstore.DefaultAuditRetention, l.Retention())
	st, err := env.Store.JetStream().Stream(ctx, eventstore.AuditStreamName)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 90*24*time.Hour, info.Config.MaxAge)
	require.Equal(t, []string{"rezus.audit.>"}, info.Config.Subjects)
	require.Equal(t, jetstream.FileStorage, info.Config.Storage)
	require.Equal(t, env.Store.Replicas(), info.Config.Replicas)

	// Opening again is fine and applies a new retention to the existing stream and its records.
	l.Append(eventstore.AuditRecord{Actor: "a", Method: "POST", Path: "/x", Code: 201})
	require.NoError(t, l.Flush(ctx))
	l2 := openAudit(t, ctx, env, eventstore.AuditConfig{Retention: 30 * 24 * time.Hour})
	info, err = st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, info.Config.MaxAge)
	require.Equal(t, uint64(1), info.State.Msgs)
	require.Equal(t, 30*24*time.Hour, l2.Retention())

	_, err = eventstore.OpenAudit(ctx, env.Store, eventstore.AuditConfig{Retention: -time.Hour})
	require.Error(t, err)
}

func TestAuditQuery(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	l := openAudit(t, ctx, env, eventstore.AuditConfig{})

	recs := []eventstore.AuditRecord{
		/* 1 */ {Actor: "alice", Role: "admin", Method: "POST", Path: "/api/v1/tenants", Kind: "Tenant", Code: 201},
		/* 2 */ {Actor: "alice", Role: "admin", Method: "PATCH", Path: "/api/v1/tenants/acme", Kind: "Tenant", Tenant: "acme", Name: "acme", Code: 200},
		/* 3 */ {Actor: "bob", Role: "edit", Method: "POST", Path: "/api/v1/tenants/acme/nodegroups", Kind: "NodeGroup", Tenant: "acme", Code: 201},
		/* 4 */ {Actor: "bob", Role: "edit", Method: "DELETE", Path: "/api/v1/tenants/globex/nodegroups/w", Kind: "NodeGroup", Tenant: "globex", Name: "w", Code: 200},
		/* 5 */ {Actor: "", Method: "POST", Path: "/api/v1/tenants/acme/nodegroups", Kind: "NodeGroup", Tenant: "acme", Code: 401},
		/* 6 */ {Actor: "carol", Role: "view", Method: "PUT", Path: "/api/v1/providers/p", Kind: "Provider", Name: "p", Code: 403},
		/* 7 */ {Actor: "bob", Role: "edit", Method: "GET", Path: "/api/v1/tenants/acme/kubeconfig", Kind: "Kubeconfig", Tenant: "acme", Code: 200},
	}
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, r := range recs {
		r.Time = base.Add(time.Duration(i) * time.Second)
		r.RequestID = "req-" + string(rune('a'+i))
		l.Append(r)
		// One at a time, so stream order is append order.
		require.NoError(t, l.Flush(ctx))
	}
	at3 := storedAt(t, ctx, env, eventstore.AuditStreamName, 3)
	at5 := storedAt(t, ctx, env, eventstore.AuditStreamName, 5)

	tests := []struct {
		name     string
		q        eventstore.AuditQuery
		want     []uint64
		wantMore bool
	}{
		{name: "everything", q: eventstore.AuditQuery{Limit: 100}, want: []uint64{1, 2, 3, 4, 5, 6, 7}},
		{name: "by actor", q: eventstore.AuditQuery{Actor: "bob", Limit: 100}, want: []uint64{3, 4, 7}},
		{name: "by actor with a limit", q: eventstore.AuditQuery{Actor: "bob", Limit: 2}, want: []uint64{3, 4}, wantMore: true},
		{name: "by kind plural", q: eventstore.AuditQuery{Kind: "nodegroups", Limit: 100}, want: []uint64{3, 4, 5}},
		{name: "by Kind", q: eventstore.AuditQuery{Kind: "Tenant", Limit: 100}, want: []uint64{1, 2}},
		{name: "by tenant, the tenant's own records included", q: eventstore.AuditQuery{Tenant: "acme", Limit: 100}, want: []uint64{2, 3, 5, 7}},
		{name: "by kind and tenant", q: eventstore.AuditQuery{Kind: "nodegroup", Tenant: "acme", Limit: 100}, want: []uint64{3, 5}},
		{name: "credential downloads", q: eventstore.AuditQuery{Kind: "kubeconfig", Limit: 100}, want: []uint64{7}},
		{name: "since a sequence", q: eventstore.AuditQuery{Window: eventstore.Window{From: eventstore.Position{After: 5}}, Limit: 100}, want: []uint64{6, 7}},
		{name: "since a time", q: eventstore.AuditQuery{Window: eventstore.Window{From: eventstore.Position{Time: at3}}, Limit: 100}, want: []uint64{3, 4, 5, 6, 7}},
		{name: "until a time", q: eventstore.AuditQuery{Window: eventstore.Window{Until: at3}, Limit: 100}, want: []uint64{1, 2, 3}},
		{name: "between times", q: eventstore.AuditQuery{Window: eventstore.Window{From: eventstore.Position{Time: at3}, Until: at5}, Limit: 100}, want: []uint64{3, 4, 5}},
		{name: "until a sequence", q: eventstore.AuditQuery{Window: eventstore.Window{UntilSeq: 2}, Limit: 100}, want: []uint64{1, 2}},
		{name: "limit", q: eventstore.AuditQuery{Limit: 3}, want: []uint64{1, 2, 3}, wantMore: true},
		{name: "no match", q: eventstore.AuditQuery{Actor: "mallory", Limit: 100}, want: []uint64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, more, err := l.Query(ctx, tt.q)
			require.NoError(t, err)
			require.Equal(t, tt.want, auditSeqs(got))
			require.Equal(t, tt.wantMore, more)
			for _, r := range got {
				want := recs[r.Seq-1]
				require.Equal(t, want.Actor, r.Actor)
				require.Equal(t, want.Path, r.Path)
				require.Equal(t, want.Code, r.Code)
				require.Equal(t, "req-"+string(rune('a'+r.Seq-1)), r.RequestID)
				require.True(t, base.Add(time.Duration(r.Seq-1)*time.Second).Equal(r.Time))
			}
		})
	}

	_, _, err := l.Query(ctx, eventstore.AuditQuery{})
	require.Error(t, err, "a query needs a limit")
}

func TestAuditFollow(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	l := openAudit(t, ctx, env, eventstore.AuditConfig{})
	l.Append(eventstore.AuditRecord{Actor: "alice", Method: "POST", Path: "/old", Code: 201})
	require.NoError(t, l.Flush(ctx))

	cur, err := l.Follow(ctx, eventstore.AuditQuery{Window: eventstore.Window{From: eventstore.Position{After: 1}}, Actor: "bob", Kind: "nodegroups"})
	require.NoError(t, err)
	defer cur.Stop()
	got := make(chan eventstore.AuditRecord, 1)
	go func() {
		if rec, err := cur.Next(ctx); err == nil {
			got <- rec
		}
	}()
	// Only the last one matches the actor and the kind.
	l.Append(eventstore.AuditRecord{Actor: "alice", Method: "POST", Kind: "NodeGroup", Path: "/a", Code: 201})
	l.Append(eventstore.AuditRecord{Actor: "bob", Method: "POST", Kind: "Tenant", Path: "/b", Code: 201})
	l.Append(eventstore.AuditRecord{Actor: "bob", Method: "DELETE", Kind: "NodeGroup", Tenant: "acme", Path: "/c", Code: 200})
	rec := recv(t, got, 10*time.Second, "the followed record")
	require.Equal(t, uint64(4), rec.Seq)
	require.Equal(t, "/c", rec.Path)

	t.Run("cancelling ctx makes Next return", func(t *testing.T) {
		nctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := cur.Next(nctx)
			done <- err
		}()
		cancel()
		require.ErrorIs(t, recv(t, done, 10*time.Second, "Next after cancel"), context.Canceled)
	})
}

func TestAuditSurvivesARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := eventstoretest.Start(t, dir)
	ctx := testCtx(t)
	l := openAudit(t, ctx, env, eventstore.AuditConfig{Retention: 7 * 24 * time.Hour})
	for _, p := range []string{"/a", "/b", "/c"} {
		l.Append(eventstore.AuditRecord{Actor: "alice", Method: "POST", Path: p, Code: 201})
	}
	require.NoError(t, l.Close(ctx))
	env.Stop()

	env = eventstoretest.Start(t, dir)
	l = openAudit(t, ctx, env, eventstore.AuditConfig{Retention: 7 * 24 * time.Hour})
	got, _, err := l.Query(ctx, eventstore.AuditQuery{Limit: 10})
	require.NoError(t, err)
	var paths []string
	for _, r := range got {
		paths = append(paths, r.Path)
	}
	require.ElementsMatch(t, []string{"/a", "/b", "/c"}, paths)
	st, err := env.Store.JetStream().Stream(ctx, eventstore.AuditStreamName)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 7*24*time.Hour, info.Config.MaxAge)
}

func TestAuditRecordsNotStoredAreLogged(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	var logs syncBuffer
	l := openAudit(t, ctx, env, eventstore.AuditConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	t.Run("the stream refuses", func(t *testing.T) {
		// Someone removed the stream under us: JetStream answers nothing.
		require.NoError(t, env.Store.JetStream().DeleteStream(ctx, eventstore.AuditStreamName))
		l.Append(eventstore.AuditRecord{Actor: "alice", Method: "DELETE", Path: "/api/v1/tenants/gone", Code: 200})
		require.NoError(t, l.Flush(ctx))
		require.Equal(t, uint64(1), l.Lost())
		require.Contains(t, logs.String(), "audit record not stored")
		require.Contains(t, logs.String(), "/api/v1/tenants/gone", "the record is in the log")
	})

	t.Run("after Close", func(t *testing.T) {
		require.NoError(t, l.Close(ctx))
		l.Append(eventstore.AuditRecord{Actor: "alice", Method: "POST", Path: "/late", Code: 201})
		require.Equal(t, uint64(2), l.Lost())
		require.Contains(t, logs.String(), "/late")
	})
}
