//go:build e2e

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// TestEmulatorApartBuildsAndUpgradesWithoutANoOpApply (issue 49): the node
// emulator runs as its own process (`rezuscloud emulator`) and the server
// builds on it (`serve --emulator-env`), so the server's data dir holds no
// node and its RSS is its own. A Talos upgrade's version write-back then
// makes no Apply: the apply held back during the upgrade finds nothing for
// tofu to act on, and the tenant says so.
func TestEmulatorApartBuildsAndUpgradesWithoutANoOpApply(t *testing.T) {
	t.Parallel()
	emuDir := t.TempDir()
	emu := exec.Command(os.Args[0], "emulator", "--data-dir", emuDir, "--emulator-kube", "off", "--log-level", "debug")
	emu.Env = append(os.Environ(), "REZUS_TEST_MAIN=1")
	var emuBuf bytes.Buffer
	emuLog := &lockedWriter{w: &emuBuf}
	emu.Stdout, emu.Stderr = emuLog, emuLog
	emuText := func() string {
		emuLog.mu.Lock()
		defer emuLog.mu.Unlock()
		return emuBuf.String()
	}
	require.NoError(t, emu.Start())
	exited := make(chan error, 1)
	go func() { exited <- emu.Wait() }()
	t.Cleanup(func() {
		_ = emu.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("emulator log:\n%s", emuText())
		}
	})
	envFile := filepath.Join(emuDir, EmulatorAPIFile)
	deadline := time.Now().Add(startWithin)
	for {
		if b, err := os.ReadFile(envFile); err == nil && strings.Contains(string(b), emulatorLightEnv+"=true") {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the emulator exited: %v\n%s", err, emuText())
		case <-time.After(50 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the emulator wrote no %s", envFile)
	}
	apart, err := readEmulatorEnv(envFile)
	require.NoError(t, err)

	tofu, mirror := tofutest.Tools(t)
	dir := t.TempDir()
	p := startServer(t, dir, "--emulator-env", envFile, "--tofu", tofu, "--provider-mirror", mirror,
		"--apply-debounce", "1500ms", "--resync", "0")
	p.eventually(60*time.Second, "the emulated provider is registered", func() bool {
		code, _ := p.do("GET", "/api/v1/providers/emulated", "")
		return code == http.StatusOK
	})
	createCluster(t, p, "apart", 1)
	p.settled("apart", 2)
	require.Len(t, apartNodes(t, apart), 2, "the machines are nodes of the emulator process")
	_, err = os.Stat(filepath.Join(dir, "emulator"))
	require.True(t, os.IsNotExist(err), "the server runs no emulator of its own")

	p.eventually(2*time.Minute, "the cluster is healthy", func() bool {
		code, h := p.do("GET", "/api/v1/tenants/apart/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	})
	require.Len(t, p.applies("apart"), 1)
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/apart", `{"spec":{"talosVersion":"v1.13.1"}}`))
	p.eventually(3*time.Minute, "the upgrade finished", func() bool {
		us := p.upgrades("apart")
		return len(us) == 1 && (us[0].Status.Phase == "Succeeded" || us[0].Status.Phase == "Failed")
	})
	require.Equal(t, "Succeeded", p.upgrades("apart")[0].Status.Phase)
	for _, n := range apartNodes(t, apart) {
		require.Equal(t, "v1.13.1", n["version"], n["name"])
	}
	p.settled("apart", 2)
	_, tn := p.do("GET", "/api/v1/tenants/apart", "")
	var cond map[string]any
	for _, c := range tn["status"].(map[string]any)["conditions"].([]any) {
		if c := c.(map[string]any); c["type"] == "Reconciled" {
			cond = c
		}
	}
	require.Equal(t, "NothingToApply", cond["reason"], "%v", cond)
	require.Len(t, p.applies("apart"), 1, "the write-back made no Apply")
}

// apartNodes lists the nodes of an emulator run apart.
func apartNodes(t *testing.T, e *apartEmulator) []map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.API.URL+"/v1/nodes", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+e.API.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var l struct{ Items []map[string]any }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&l))
	return l.Items
}
