//go:build !e2e && !browser

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// TestEmulatorEnvFile: serve --emulator-env reads what `rezuscloud
// emulator` writes, and refuses a missing or incomplete file and a second
// emulator in-process, with the flag named.
func TestEmulatorEnvFile(t *testing.T) {
	dir := t.TempDir()
	api := emulatorAPI{URL: "http://127.0.0.1:4000", Token: "tok"}
	path := filepath.Join(dir, "api.env")
	require.NoError(t, os.WriteFile(path, emulatorEnvFile(api, true), 0o600))
	cfg := parseServe(t, "--emulator-env", path)
	require.Equal(t, &apartEmulator{API: api, Light: true}, cfg.Infra.Apart)
	require.True(t, cfg.Infra.emulated())
	require.True(t, cfg.Infra.lightNodes())
	require.NotNil(t, drainSkip(cfg.Infra), "light nodes are not drained")

	api.Versions = nil
	kube := filepath.Join(dir, "kube.env")
	b := append(emulatorEnvFile(api, false), []byte(emulatorKubeVersionsEnv+"=v1.35.4,v1.36.1\n")...)
	require.NoError(t, os.WriteFile(kube, b, 0o600))
	got, err := readEmulatorEnv(kube)
	require.NoError(t, err)
	require.False(t, got.Light)
	require.Equal(t, []string{"v1.35.4", "v1.36.1"}, got.API.Versions.Kubernetes)

	serveErr := func(args ...string) error {
		cmd := serveCommand()
		cmd.Action = func(c *cli.Context) error { _, err := serveConfigFrom(c); return err }
		app := &cli.App{Name: "rezuscloud", Commands: []*cli.Command{cmd}}
		return app.Run(append([]string{"rezuscloud", "serve"}, args...))
	}
	require.ErrorContains(t, serveErr("--emulator-env", filepath.Join(dir, "missing")), "--emulator-env")
	empty := filepath.Join(dir, "empty.env")
	require.NoError(t, os.WriteFile(empty, []byte("EMULATOR_ENDPOINT=http://x\n"), 0o600))
	require.ErrorContains(t, serveErr("--emulator-env", empty), "EMULATOR_TOKEN")
	require.ErrorContains(t, serveErr("--emulator-env", path, "--with-emulator"), "one emulator")
}
