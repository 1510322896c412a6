package kubecp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestInitialCluster(t *testing.T) {
	cp1 := &etcdserverpb.Member{ID: 1, Name: "cp-1", PeerURLs: []string{"https://127.0.9.1:2380"}}
	self := &etcdserverpb.Member{ID: 2, PeerURLs: []string{"https://127.0.9.2:2380"}} // added, not started: no name yet
	other := &etcdserverpb.Member{ID: 3, PeerURLs: []string{"https://127.0.9.3:2380"}}
	for _, tc := range []struct {
		name    string
		members []*etcdserverpb.Member
		want    string
	}{
		{"joining one member", []*etcdserverpb.Member{cp1, self},
			"cp-1=https://127.0.9.1:2380,cp-2=https://127.0.9.2:2380"},
		// As `etcdctl member add` prints it: another joiner that has not
		// started yet has no name.
		{"beside another joiner", []*etcdserverpb.Member{cp1, self, other},
			"cp-1=https://127.0.9.1:2380,cp-2=https://127.0.9.2:2380,=https://127.0.9.3:2380"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, initialCluster(tc.members, 2, "cp-2"))
		})
	}
}
