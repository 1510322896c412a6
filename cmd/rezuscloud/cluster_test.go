package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/freeport"
)

// writeClusterKey writes the secrets key the replicas of a test cluster share.
func writeClusterKey(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secrets.key")
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte{9}, 32), 0o600))
	return path
}

// testCluster is three replicas' route addresses and data dirs, and the
// flags that make replica i one node of their embedded NATS cluster. The
// HTTP listeners are on port 0; the route ports are picked free beforehand,
// as every replica must be given its peers' before it starts.
type testCluster struct {
	key    string
	routes [3]string
	dirs   [3]string
}

func newTestCluster(t *testing.T) *testCluster {
	oneClusterAtATime(t)
	c := &testCluster{key: writeClusterKey(t)}
	// A replica is given its peers' route addresses before any of them
	// starts, so they cannot listen on port 0 and say where (freeport).
	ports, err := freeport.Loopback(3)
	require.NoError(t, err)
	for i := range 3 {
		c.routes[i], c.dirs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i])), t.TempDir()
	}
	return c
}

func (c *testCluster) flags(i int, extra ...string) []string {
	var peers []string
	for j, r := range c.routes {
		if j != i {
			peers = append(peers, r)
		}
	}
	return append([]string{"--cluster-name", "rz", "--cluster-listen", c.routes[i], "--peers", strings.Join(peers, ","),
		"--secrets-key-file", c.key}, extra...)
}

// launch starts replica i without waiting for it to be ready (it is only
// with its peers), once it said where it listens.
func (c *testCluster) launch(t *testing.T, i int, extra ...string) *proc {
	t.Helper()
	p := launchServer(t, c.dirs[i], c.flags(i, extra...)...)
	p.waitAddress()
	return p
}
