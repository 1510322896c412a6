package kubelet

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

func TestIPAM(t *testing.T) {
	a := newIPAM(netip.MustParsePrefix("10.244.1.0/29")) // .0 network, .1 gateway, .7 broadcast: .2-.6 free

	var got []string
	for i := range 5 {
		addr, err := a.allocate(types.UID(fmt.Sprint(i)))
		require.NoError(t, err)
		got = append(got, addr.String())
	}
	assert.Equal(t, []string{"10.244.1.2", "10.244.1.3", "10.244.1.4", "10.244.1.5", "10.244.1.6"}, got)
	again, err := a.allocate("0")
	require.NoError(t, err)
	assert.Equal(t, "10.244.1.2", again.String(), "a pod keeps its address")
	_, err = a.allocate("full")
	assert.Error(t, err, "the range is exhausted")

	a.release("3")
	addr, err := a.allocate("new")
	require.NoError(t, err)
	assert.Equal(t, "10.244.1.5", addr.String(), "a released address is handed out again")

	b := newIPAM(netip.MustParsePrefix("10.244.2.0/24"))
	b.reserve("old", netip.MustParseAddr("10.244.2.2")) // a pod from before a restart
	addr, err = b.allocate("new")
	require.NoError(t, err)
	assert.Equal(t, "10.244.2.3", addr.String())

	b.setPrefix(netip.MustParsePrefix("10.244.9.0/24")) // the node got its pod CIDR
	addr, err = b.allocate("newer")
	require.NoError(t, err)
	assert.Equal(t, "10.244.9.2", addr.String())
}

func TestFallbackPodCIDR(t *testing.T) {
	p := fallbackPodCIDR("worker-1")
	assert.Equal(t, 24, p.Bits())
	assert.True(t, netip.MustParsePrefix("10.244.0.0/16").Overlaps(p))
	assert.Equal(t, p, fallbackPodCIDR("worker-1"), "stable")
}
