package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoopback: distinct ports, below the ephemeral range, each bindable.
func TestLoopback(t *testing.T) {
	ports, err := Loopback(5)
	require.NoError(t, err)
	require.Len(t, ports, 5)
	seen := map[int]bool{}
	low := ephemeralLow()
	for _, p := range ports {
		require.False(t, seen[p], "port %d twice", p)
		seen[p] = true
		require.Less(t, p, low)
		require.GreaterOrEqual(t, p, low-span)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err)
		require.NoError(t, l.Close())
	}
}
