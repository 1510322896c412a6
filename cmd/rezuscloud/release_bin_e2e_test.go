//go:build e2e

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var current struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// currentBinary returns the server built from the working tree without the
// race detector (as released), once per test run.
func currentBinary(t *testing.T) string {
	t.Helper()
	current.once.Do(func() {
		dir, err := os.MkdirTemp("", "rezuscloud-current-")
		if err != nil {
			current.err = err
			return
		}
		current.bin = filepath.Join(dir, "rezuscloud")
		cmd := exec.Command("go", "build", "-o", current.bin, ".")
		current.out, current.err = cmd.CombinedOutput()
	})
	require.NoError(t, current.err, "building the current server: %s", current.out)
	return current.bin
}

// launchBinary starts bin as a server, as launch does, logging at info.
func launchBinary(t *testing.T, bin, dataDir string, extra ...string) *proc {
	t.Helper()
	return launch(t, bin, nil, dataDir, append([]string{"--log-level", "info"}, extra...)...)
}

// readyWithin waits for p's /readyz and says how long it took from since.
func readyWithin(p *proc, since time.Time) time.Duration {
	p.t.Helper()
	p.waitReady(p.dataDir)
	return time.Since(since)
}

// heavySlot is held by the e2e tests that must not overlap: those that run
// a three-replica NATS cluster (two such clusters at once under -race on
// two cores starved their raft elections in CI, see Taskfile test:slow)
// and the real-Kubernetes test that measures a workload's availability
// during an upgrade (beside the rolling upgrade's own real control plane,
// the load kept a restarted kubelet's Node NotReady long enough for its
// pods to go NotReady: 1 of 3 Ready). The other e2e tests run beside any.
var heavySlot sync.Mutex

// oneHeavyTest waits for the other heavy test to end and holds the slot
// until this one does.
func oneHeavyTest(t *testing.T) {
	heavySlot.Lock()
	t.Cleanup(heavySlot.Unlock)
}
