package eventstore_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func TestDecideClusterLevel(t *testing.T) {
	beat := func(holder, server string, level int) eventstore.Replica {
		return eventstore.Replica{Holder: holder, NATSServer: server, SchemaLevel: level}
	}
	tests := []struct {
		name     string
		beats    []eventstore.Replica
		peers    []string
		ceiling  int
		cluster  int
		write    int
		unknowns []string
	}{
		{"alone", []eventstore.Replica{beat("a", "n1", 2)}, []string{"n1"}, 0, 2, 2, nil},
		{"external nats: no peers", []eventstore.Replica{beat("a", "", 2), beat("b", "", 2)}, nil, 0, 2, 2, nil},
		{"all beat", []eventstore.Replica{beat("a", "n1", 2), beat("b", "n2", 2), beat("c", "n3", 2)}, []string{"n1", "n2", "n3"}, 0, 2, 2, nil},
		{"a 0.1.0 node beats not", []eventstore.Replica{beat("a", "n1", 2), beat("b", "n2", 2)}, []string{"n1", "n2", "n3"}, 0, 1, 1, []string{"n3"}},
		{"a level-1 beat", []eventstore.Replica{beat("a", "", 2), beat("b", "", 0)}, nil, 0, 1, 1, nil},
		{"a newer replica", []eventstore.Replica{beat("a", "", 2), beat("b", "", 3)}, nil, 0, 2, 2, nil},
		{"ceiling below", []eventstore.Replica{beat("a", "", 2)}, nil, 1, 2, 1, nil},
		{"ceiling above", []eventstore.Replica{beat("a", "", 2), beat("b", "n2", 1)}, nil, 2, 1, 1, nil},
		{"no beats yet", nil, nil, 0, domain.SchemaLevel, domain.SchemaLevel, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := eventstore.DecideClusterLevel(tt.beats, tt.peers, tt.ceiling)
			require.Equal(t, tt.cluster, v.ClusterLevel)
			require.Equal(t, tt.write, v.WriteLevel)
			require.Equal(t, tt.unknowns, v.UnknownPeers)
		})
	}
}

func newReplicas(t *testing.T, cfg eventstore.ReplicasConfig) *eventstore.Replicas {
	t.Helper()
	if cfg.Release == "" {
		cfg.Release = "0.2.0"
	}
	r, err := eventstore.NewReplicas(cfg)
	require.NoError(t, err)
	return r
}

// The cluster level on real heartbeats: a NATS node of the cluster whose
// replica does not beat (0.1.0 does not) holds the level at 1 until a
// heartbeat names it; a replica that stops takes its beat out, and one
// that dies stops counting when its beat expires. The store writes what
// the heartbeats say, from the first append after Start.
func TestReplicasClusterLevel(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	peers := []string{"n1", "n2", "n3"}
	var skew atomic.Int64 // a's clock, moved past a grace below
	a := newReplicas(t, eventstore.ReplicasConfig{Holder: "a", NATSServer: "n1", Peers: func() []string { return peers },
		Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	require.Equal(t, 1, a.WriteLevel(), "level 1 until the others are read")
	store, err := eventstore.Open(ctx, env.Conn, eventstore.Config{Schema: a})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx, store))
	v := a.View()
	require.Equal(t, 1, v.ClusterLevel)
	require.Equal(t, []string{"n2", "n3"}, v.UnknownPeers)
	require.Len(t, v.Replicas, 1)
	require.Equal(t, "0.2.0", v.Replicas[0].Version)

	b := newReplicas(t, eventstore.ReplicasConfig{Holder: "b", NATSServer: "n2"})
	require.NoError(t, b.Start(ctx, store))
	require.NoError(t, a.Beat(ctx))
	require.Equal(t, []string{"n3"}, a.View().UnknownPeers)
	require.Equal(t, 1, a.WriteLevel(), "n3 runs a release before heartbeats")

	// The append path writes level 1 while n3 is unknown.
	ref := domain.Ref{Kind: "Upgrade", Tenant: "acme", Name: "while-old"}
	obj := &domain.Object{Metadata: domain.ObjectMeta{Name: ref.Name, Tenant: ref.Tenant}, Spec: json.RawMessage(upgradeSpec)}
	mustExecute(t, ctx, store, domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: "test", Now: now, NewUID: "u1"})
	require.NotContains(t, rawLast(t, ctx, store, ref), "deadlines")

	// n3 is replaced by a replica that beats: level 2.
	c := newReplicas(t, eventstore.ReplicasConfig{Holder: "c", NATSServer: "n3"})
	require.NoError(t, c.Start(ctx, store))
	require.NoError(t, a.Beat(ctx))
	require.Equal(t, 2, a.WriteLevel())
	require.Empty(t, a.View().UnknownPeers)
	ref.Name = "all-new"
	obj.Metadata.Name = ref.Name
	mustExecute(t, ctx, store, domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: "test", Now: now, NewUID: "u2"})
	require.Contains(t, rawLast(t, ctx, store, ref), `"deadlines"`)

	// b stops: its beat goes at once, and its node (still a peer here)
	// is unknown again.
	bctx, stopB := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	stopB()
	require.NoError(t, recv(t, done, 5*time.Second, "b to stop"))
	require.NoError(t, a.Beat(ctx))
	require.Equal(t, []string{"n2"}, a.View().UnknownPeers)
	require.Equal(t, 1, a.WriteLevel())

	// c dies without a word: its beat expires after three intervals
	// (a replica started with a short interval shortens the bucket's).
	peers = []string{"n1", "n3"}
	require.NoError(t, a.Beat(ctx))
	require.Contains(t, holders(a.View()), "c")
	d := newReplicas(t, eventstore.ReplicasConfig{Holder: "d", Interval: 100 * time.Millisecond})
	require.NoError(t, d.Start(ctx, store))
	require.Eventually(t, func() bool {
		return a.Beat(ctx) == nil && !slices.Contains(holders(a.View()), "c")
	}, 10*time.Second, 50*time.Millisecond)
	// n3's replica was seen beating: one read without its beat may be a
	// lagging read, so n3 is not unknown before a TTL since its last beat.
	require.Empty(t, a.View().UnknownPeers)
	skew.Add(int64(a.TTL()))
	require.NoError(t, a.Beat(ctx))
	require.Equal(t, []string{"n3"}, a.View().UnknownPeers)
	require.Equal(t, 1, a.WriteLevel())
}

func holders(v eventstore.ReplicaView) []string {
	var out []string
	for _, r := range v.Replicas {
		out = append(out, r.Holder)
	}
	return out
}

func TestReplicasConfigValidate(t *testing.T) {
	for _, cfg := range []eventstore.ReplicasConfig{
		{Release: "0.2.0"},
		{Holder: "a"},
		{Holder: "a", Release: "0.2.0", WriteLevel: domain.SchemaLevel + 1},
		{Holder: "a", Release: "0.2.0", WriteLevel: -1},
	} {
		_, err := eventstore.NewReplicas(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}
