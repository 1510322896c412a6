package talos

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAddressPolicy(t *testing.T) {
	lab, err := ParseNetworks("10.20.0.0/16, 127.0.0.0/8,192.168.7.9")
	require.NoError(t, err)
	own := []netip.Addr{netip.MustParseAddr("10.20.0.2")}
	for _, tc := range []struct {
		name, ip string
		policy   AddressPolicy
		refused  string // "" allowed
	}{
		{"a private address", "10.0.0.10", AddressPolicy{}, ""},
		{"a public address", "203.0.113.7", AddressPolicy{}, ""},
		{"IPv6 unicast", "2001:db8::10", AddressPolicy{}, ""},
		{"cloud metadata", "169.254.169.254", AddressPolicy{}, "link-local"},
		{"cloud metadata, mapped", "::ffff:169.254.169.254", AddressPolicy{}, "link-local"},
		{"IPv6 link-local", "fe80::1", AddressPolicy{}, "link-local"},
		{"AWS IPv6 metadata", "fd00:ec2::254", AddressPolicy{}, "metadata"},
		{"Azure wire server", "168.63.129.16", AddressPolicy{}, "metadata"},
		{"loopback", "127.0.0.1", AddressPolicy{}, "loopback"},
		{"loopback elsewhere in 127/8", "127.0.5.9", AddressPolicy{}, "loopback"},
		{"IPv6 loopback", "::1", AddressPolicy{}, "loopback"},
		{"loopback, mapped", "::ffff:127.0.0.1", AddressPolicy{}, "loopback"},
		{"loopback with the emulator", "127.0.5.9", AddressPolicy{AllowLoopback: true}, ""},
		{"unspecified", "0.0.0.0", AddressPolicy{}, "unspecified"},
		{"this network", "0.1.2.3", AddressPolicy{}, "unspecified"},
		{"broadcast", "255.255.255.255", AddressPolicy{}, "broadcast"},
		{"multicast", "224.0.0.1", AddressPolicy{}, "multicast"},
		{"the server itself", "10.20.0.2", AddressPolicy{Own: own}, "own address"},
		{"inside the networks", "10.20.3.4", AddressPolicy{Networks: lab}, ""},
		{"a single address listed", "192.168.7.9", AddressPolicy{Networks: lab}, ""},
		{"loopback listed", "127.0.0.1", AddressPolicy{Networks: lab}, ""},
		{"outside the networks", "10.0.0.10", AddressPolicy{Networks: lab}, "outside the networks"},
		{"metadata outside the networks", "169.254.169.254", AddressPolicy{Networks: lab}, "outside the networks"},
		{"the server inside the networks", "10.20.0.2", AddressPolicy{Networks: lab, Own: own}, "own address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.policy.CheckAddress(tc.ip)
			if tc.refused == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.refused)
		})
	}
	require.NoError(t, AddressPolicy{}.CheckAddress("node-2.lab"), "a name is checked where it is dialled")
	_, err = ParseNetworks("10.0.0.0/33")
	require.Error(t, err)
	_, err = ParseNetworks("rack-1")
	require.Error(t, err)
}

// A NodeAPI with a policy never connects to a refused address: the
// listener on loopback sees no connection, and the error says why.
func TestNodeAPIRefusesToDialOutsideItsPolicy(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bundle, err := NewBundle("v1.13.0", time.Now())
	require.NoError(t, err)
	api := NodeAPI{Timeout: 2 * time.Second, Addresses: &AddressPolicy{}}
	_, err = api.Probe(ctx, bundle, lis.Addr().String())
	require.Error(t, err)
	_, err = api.ApplyConfig(ctx, nil, lis.Addr().String(), []byte("version: v1alpha1"), true)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "loopback")
	assert.Zero(t, accepted.Load(), "no connection reached the listener")

	// Without a policy the same call does connect (the listener is no Talos
	// API, so it fails after connecting).
	_, _ = NodeAPI{Timeout: 2 * time.Second}.ApplyConfig(ctx, nil, lis.Addr().String(), []byte("version: v1alpha1"), true)
	require.Eventually(t, func() bool { return accepted.Load() > 0 }, 5*time.Second, 10*time.Millisecond)
}
