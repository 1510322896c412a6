package tofu

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// TestSandboxFirstProcess: issue 42, finding 4. tofu's sandbox is a PID
// namespace of its own, whose first process is this binary: tofu's exit code
// reaches the server unchanged (a plan's -detailed-exitcode), an orphan left
// in the namespace (a provider plugin whose tofu died) is reaped, a cancel
// still stops tofu, and nothing of the namespace outlives the run, not even
// a process that ignores the SIGINT.
func TestSandboxFirstProcess(t *testing.T) {
	dir := t.TempDir()
	script := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+text), 0o700))
		return p
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}

	t.Run("exit code", func(t *testing.T) {
		tf := Binary{Bin: script("exit2", "exit 2\n"), Sandbox: &Sandbox{}}
		var out bytes.Buffer
		err := tf.RunTofu(context.Background(), dir, env, &out, "plan")
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "%v: %s", err, out.String())
		require.Equal(t, 2, exit.ExitCode(), out.String())
	})

	t.Run("own processes only", func(t *testing.T) {
		tf := Binary{Bin: script("ps", "echo $PPID; set -- /proc/[0-9]*; echo $#\n"), Sandbox: &Sandbox{}}
		var out bytes.Buffer
		require.NoError(t, tf.RunTofu(context.Background(), dir, env, &out, "x"), out.String())
		// The shell's parent is the first process; /proc shows the two
		// of them, nothing of the server.
		require.Equal(t, "1\n2\n", out.String())
	})

	t.Run("orphans reaped, cancel ends everything", func(t *testing.T) {
		script("orphan", "while [ \"$(cut -d' ' -f4 /proc/$$/stat)\" != 1 ]; do sleep 0.01; done\necho $$ > \"$1\"\n")
		bin := script("tofu", "( ./orphan orphan.pid & )\n( exec sleep 1000 & )\necho ready\nexec sleep 1000\n")
		tf := Binary{Bin: bin, Sandbox: &Sandbox{}, Grace: time.Minute}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out := &syncBuffer{}
		done := make(chan error, 1)
		go func() { done <- tf.RunTofu(ctx, dir, env, out, "apply") }()

		// The orphan (a grandchild whose parent left) is the first
		// process's child once it has said its pid, and is gone at once
		// after: reaped, not left a zombie.
		var nsPID string
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(filepath.Join(dir, "orphan.pid"))
			nsPID = strings.TrimSpace(string(b))
			return err == nil && nsPID != ""
		}, time.Minute, 10*time.Millisecond, out.String())
		pgid := 0
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(filepath.Join(dir, groupFile))
			pgid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && pgid > 1
		}, time.Minute, 10*time.Millisecond)
		require.Eventually(t, func() bool {
			_, ok := groupProcs(t, pgid)[nsPID]
			return !ok
		}, time.Minute, 10*time.Millisecond, "the orphan %s was not reaped", nsPID)
		// Left: the first process, tofu and the orphan that ignores SIGINT.
		require.Eventually(t, func() bool { return len(groupProcs(t, pgid)) == 3 }, time.Minute, 10*time.Millisecond)

		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(30 * time.Second):
			t.Fatal("a cancelled run did not end before its grace: the sandbox outlived tofu")
		}
		require.Empty(t, groupProcs(t, pgid), "processes of the sandbox outlived the run")
	})
}

// groupProcs are the processes of process group pgid, by their pid in their
// own PID namespace (the innermost of /proc/<pid>/status's NSpid), with
// their state.
func groupProcs(t *testing.T, pgid int) map[string]string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	procs := map[string]string{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(status), "\n") {
			if ns, ok := strings.CutPrefix(l, "NSpid:"); ok {
				ids := strings.Fields(ns)
				procs[ids[len(ids)-1]] = f[0]
			}
		}
	}
	return procs
}

// TestSandboxRunsProviderPlugins: tofu in its sandbox has no capability, a
// /proc of its own and a /dev of a few devices; a provider plugin it starts
// from the mirror (talos: talos_machine_secrets makes a PKI in the plugin)
// still works, its plugin cache bound back under the hidden data dir.
func TestSandboxRunsProviderPlugins(t *testing.T) {
	tofu, mirror := tofutest.Tools(t)
	tofutest.RequireProvider(t, mirror, "registry.opentofu.org/siderolabs/talos", "0.8.0")
	data := t.TempDir()
	dir := filepath.Join(data, "tofu", "tenants", "acme")
	cache := filepath.Join(data, "tofu", "plugin-cache")
	for _, d := range []string{dir, cache} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte(`terraform {
  required_providers {
    talos = { source = "siderolabs/talos", version = "0.8.0" }
  }
}
resource "talos_machine_secrets" "s" {}
output "ca" { value = nonsensitive(talos_machine_secrets.s.client_configuration.ca_certificate) != "" }
`), 0o600))
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Join(data, "tofu", "home"), "TMPDIR=" + os.TempDir(),
		"TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1", "TF_CLI_CONFIG_FILE=" + tofutest.CLIConfig(t, mirror), "TF_PLUGIN_CACHE_DIR=" + cache}
	tf := Binary{Bin: tofu, Mirror: mirror, Sandbox: &Sandbox{Hide: []string{data}, Keep: []string{cache}}}
	ctx := context.Background()
	var out bytes.Buffer
	require.NoError(t, tf.RunTofu(ctx, dir, env, &out, "init", "-input=false", "-no-color"), out.String())
	out.Reset()
	require.NoError(t, tf.RunTofu(ctx, dir, env, &out, "apply", "-auto-approve", "-input=false", "-no-color"), out.String())
	out.Reset()
	require.NoError(t, tf.RunTofu(ctx, dir, env, &out, "output", "-raw", "ca"), out.String())
	require.Equal(t, "true", out.String())
	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "the plugin cache, bound back, holds the provider")
}
