package eventstore

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A read's consumer is trusted to hold the whole stream only on the leader,
// on a single server, or on a replica the leader sees as current.
func TestHostIsCurrent(t *testing.T) {
	replicas := func(rs ...*jetstream.PeerInfo) *jetstream.ClusterInfo {
		return &jetstream.ClusterInfo{Name: "rz", Leader: "a", Replicas: rs}
	}
	for _, tc := range []struct {
		name string
		c    *jetstream.ClusterInfo
		host string
		want bool
	}{
		{"a single server", &jetstream.ClusterInfo{Leader: "a"}, "a", true},
		{"no cluster info", nil, "b", true},
		{"the leader", replicas(&jetstream.PeerInfo{Name: "b", Current: true}), "a", true},
		{"a current replica", replicas(&jetstream.PeerInfo{Name: "b", Current: true}, &jetstream.PeerInfo{Name: "c"}), "b", true},
		{"a replica still catching up", replicas(&jetstream.PeerInfo{Name: "b", Current: false, Lag: 40}), "b", false},
		{"a replica with lag", replicas(&jetstream.PeerInfo{Name: "b", Current: true, Lag: 1}), "b", false},
		{"an offline replica", replicas(&jetstream.PeerInfo{Name: "b", Current: true, Offline: true}), "b", false},
		{"a server the leader does not list", replicas(&jetstream.PeerInfo{Name: "b", Current: true}), "d", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, hostIsCurrent(tc.c, tc.host))
		})
	}
}
