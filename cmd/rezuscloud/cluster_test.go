package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeClusterKey writes the secrets key the replicas of a test cluster share.
func writeClusterKey(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secrets.key")
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte{9}, 32), 0o600))
	return path
}

// testCluster is three replicas' addresses and data dirs, and the flags
// that make replica i one node of their embedded NATS cluster.
type testCluster struct {
	key          string
	http, routes [3]string
	dirs         [3]string
}

func newTestCluster(t *testing.T) *testCluster {
	c := &testCluster{key: writeClusterKey(t)}
	for i := range 3 {
		c.http[i], c.routes[i], c.dirs[i] = freePort(t), freePort(t), t.TempDir()
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

func (c *testCluster) launch(t *testing.T, i int, extra ...string) *proc {
	return launchServer(t, c.http[i], c.dirs[i], c.flags(i, extra...)...)
}
