package eventstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A NATS node whose replica was seen beating is not taken for a replica
// of an older release the moment one read misses its beat (a lagging
// read, a replica just cut off): only after the heartbeat TTL. A node
// never seen beating counts at once.
func TestPeersWithoutGrace(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	r, err := NewReplicas(ReplicasConfig{Holder: "a-1", Release: "0.2.0", NATSServer: "a", Interval: 5 * time.Second, Now: func() time.Time { return now }})
	require.NoError(t, err)
	peers := []string{"a", "b", "old"}
	beats := []Replica{{Holder: "a-1", NATSServer: "a"}, {Holder: "b-1", NATSServer: "b"}}
	require.Equal(t, []string{"old"}, r.peersWithoutGrace(peers, beats), "b beats; old never did")
	view := DecideClusterLevel(beats, r.peersWithoutGrace(peers, beats), 0)
	require.Equal(t, []string{"old"}, view.UnknownPeers)

	// b's beat is missing from a read: within the TTL it is not unknown.
	now = now.Add(5 * time.Second)
	onlyA := beats[:1]
	require.Equal(t, []string{"old"}, r.peersWithoutGrace(peers, onlyA))
	now = now.Add(r.TTL() - 5*time.Second - time.Millisecond)
	require.Equal(t, []string{"old"}, r.peersWithoutGrace(peers, onlyA))
	// A whole TTL without it: a NATS node without a replica that beats.
	now = now.Add(2 * time.Millisecond)
	require.Equal(t, []string{"b", "old"}, r.peersWithoutGrace(peers, onlyA))
}
