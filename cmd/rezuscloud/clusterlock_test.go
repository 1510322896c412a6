package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// oneClusterAtATime waits for, and holds until the test ends, a lock that
// every test running a three-replica embedded NATS cluster takes, across
// the test processes of CI's suites: two such clusters at once under -race
// on 2 cores lost their quorum in CI (TestThreeReplicasSurviveTheLossOfTheApplyingOne
// of the e2e suite beside TestReplicasWaitForTheirCluster of the process
// suite, each green alone). With it the process suite runs beside the e2e
// suite (Taskfile test:slow). The lock is a flock on a file in the temp
// dir, released by the kernel when a killed test process's file closes.
func oneClusterAtATime(t *testing.T) {
	t.Helper()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("rezuscloud-test-cluster-%d.lock", os.Getuid()))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	start := time.Now()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	require.NoError(t, err, "locking %s", path)
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %s for another test's three-replica cluster to end (%s)", waited.Round(time.Second), path)
	}
	t.Cleanup(func() { _ = f.Close() })
}
