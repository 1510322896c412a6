package kubecp

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a shared Log for tests.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestProcessRestartsAChildThatExits(t *testing.T) {
	var shared lockedBuffer
	file := filepath.Join(t.TempDir(), "crash.log")
	p, err := startProcess("crash", "v1", "/bin/sh", []string{"-c", "echo started; exit 3"}, newLogSink("[crash n1] ", &shared, file))
	require.NoError(t, err)
	defer p.stop(time.Second)

	require.Eventually(t, func() bool { return p.info().Restarts >= 1 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Count(shared.String(), "[crash n1] started\n") >= 2 }, 5*time.Second, 20*time.Millisecond)
	assert.Contains(t, shared.String(), "[crash n1] kubecp: crash exited (exit status 3)")
	assert.True(t, p.exited())
	assert.Contains(t, p.log.lastLines(), "started")

	p.stop(time.Second)
	p.stop(time.Second) // idempotent
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(b), "started\n")
}

func TestProcessStop(t *testing.T) {
	t.Run("SIGTERM", func(t *testing.T) {
		p, err := startProcess("sleep", "v1", "/bin/sleep", []string{"600"}, newLogSink("", nil, filepath.Join(t.TempDir(), "sleep.log")))
		require.NoError(t, err)
		info := p.info()
		require.NotZero(t, info.PID)
		assert.Equal(t, "v1", info.Version)

		start := time.Now()
		p.stop(10 * time.Second)
		assert.Less(t, time.Since(start), 5*time.Second)
		assert.Zero(t, p.info().PID)
		assert.Zero(t, p.info().Restarts)
		assert.ErrorIs(t, syscall.Kill(info.PID, 0), syscall.ESRCH)
	})
	t.Run("SIGKILL after the grace period", func(t *testing.T) {
		// A shell that ignores SIGTERM and keeps running (no child of its
		// own to orphan).
		p, err := startProcess("stubborn", "v1", "/bin/sh", []string{"-c", "trap '' TERM; echo ready; while :; do :; done"},
			newLogSink("", nil, filepath.Join(t.TempDir(), "stubborn.log")))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return strings.Contains(p.log.lastLines(), "ready") }, 5*time.Second, 10*time.Millisecond)
		start := time.Now()
		p.stop(200 * time.Millisecond)
		assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
		assert.Contains(t, p.log.lastLines(), "did not stop within 200ms of SIGTERM")
	})
}

func TestLogSinkRotates(t *testing.T) {
	file := filepath.Join(t.TempDir(), "x.log")
	s := newLogSink("", nil, file)
	line := []byte(strings.Repeat("x", 1023) + "\n")
	for range logFileMaxBytes/len(line) + 10 {
		_, _ = s.Write(line)
	}
	s.close()
	cur, err := os.Stat(file)
	require.NoError(t, err)
	old, err := os.Stat(file + ".1")
	require.NoError(t, err)
	assert.Equal(t, int64(10*len(line)), cur.Size())
	assert.Equal(t, int64(logFileMaxBytes), old.Size())
}

// TestChildrenDieWithTheEmulator kills a process that started a child the
// way a Node does (this test binary again, as the helper below) with
// SIGKILL, which no cleanup survives: Pdeathsig ends the child with it.
func TestChildrenDieWithTheEmulator(t *testing.T) {
	if os.Getenv("KUBECP_TEST_HELPER") == "parent" {
		p, err := startProcess("sleep", "v1", "/bin/sleep", []string{"600"}, newLogSink("", nil, os.DevNull))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(p.info().PID)
		select {} // until killed
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestChildrenDieWithTheEmulator$")
	cmd.Env = append(os.Environ(), "KUBECP_TEST_HELPER=parent")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, line)
	require.NoError(t, syscall.Kill(pid, 0), "the child runs")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return gone(pid) }, 10*time.Second, 20*time.Millisecond, "child %d outlived its parent", pid)
}

// gone reports whether pid has exited: no such process, or a zombie that
// a PID 1 which reaps nothing (as in some containers) keeps.
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}
