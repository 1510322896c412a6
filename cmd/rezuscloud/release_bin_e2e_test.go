//go:build e2e

package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// Release0_1_0 is the commit of release 0.1.0, the one before versions
// existed (named so afterwards).
const release0_1_0 = "2817901ed494d082fa2cf0ba237cb16aad98d687"

// releaseBinary returns the server built from a release's commit, cached
// under <tools dir>/releases/<commit>/ so it is built once per machine. The
// commit must be in this clone: a shallow clone fails with a message saying
// so, never a skip, since the upgrade tests are the point of keeping it.
func releaseBinary(t *testing.T, commit string) string {
	t.Helper()
	tools, err := tofutest.ToolsDir()
	require.NoError(t, err)
	dir := filepath.Join(tools, "releases", commit)
	bin := filepath.Join(dir, "rezuscloud")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	root, err := tofutest.RepoRoot()
	require.NoError(t, err)
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("release commit %s is not in this clone (%v: %s): the upgrade tests build the previous release from it; "+
			"fetch the full history (git fetch --unshallow, or actions/checkout with fetch-depth: 0)", commit, err, bytes.TrimSpace(out))
	}
	work := filepath.Join(t.TempDir(), "src")
	git := func(args ...string) {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	git("worktree", "add", "--detach", work, commit)
	defer git("worktree", "remove", "--force", work)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	tmp := bin + ".building"
	build := exec.Command("go", "build", "-o", tmp, "./cmd/rezuscloud")
	build.Dir = work
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building release %s: %s", commit, out)
	// A rename, so a build cut short never leaves a binary behind.
	require.NoError(t, os.Rename(tmp, bin))
	return bin
}

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

// launchBinary starts bin as a server listening on addr, as launchServer
// starts the test binary, without waiting for it.
func launchBinary(t *testing.T, bin, addr, dataDir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--listen", addr, "--data-dir", dataDir, "--admin-token", token, "--log-level", "info"}, extra...)
	cmd := exec.Command(bin, args...)
	p := &proc{t: t, cmd: cmd, url: "http://" + addr, dataDir: dataDir, logs: &bytes.Buffer{}, done: make(chan error, 1), client: http.DefaultClient}
	p.out = &lockedWriter{w: p.logs}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("server %s (%s) log:\n%s", addr, bin, p.log())
		}
	})
	return p
}

// readyWithin waits for p's /readyz and says how long it took from since.
func readyWithin(p *proc, since time.Time) time.Duration {
	p.t.Helper()
	require.True(p.t, p.waitReady(p.dataDir), "another process took %s", p.url)
	return time.Since(since)
}
