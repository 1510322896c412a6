//go:build !e2e && !browser

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// fakeKubeTools lays out a tools dir as hack/kube.sh builds it, with
// executables that never run: enough for the server to believe the real
// control plane is there (kubecp.Available), as long as no machine is made.
func fakeKubeTools(t *testing.T, versions ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, v := range versions {
		d := filepath.Join(dir, "kube", v)
		require.NoError(t, os.MkdirAll(d, 0o755))
		for _, bin := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			require.NoError(t, os.WriteFile(filepath.Join(d, bin), []byte("#!/bin/sh\nexit 1\n"), 0o755))
		}
	}
	return dir
}

// TestEmulatedProviderRunsTheToolsVersions: with the real control plane,
// the Provider `emulated` declares the Kubernetes versions the tools dir
// holds, and a tenant built on it is refused another one with a 422 on
// spec.kubernetesVersion naming them (issue 43: v1.35.5 was accepted and
// the Upgrade then waited forever); restarted with light nodes, the stored
// Provider drops them and the same change passes.
func TestEmulatedProviderRunsTheToolsVersions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tools := fakeKubeTools(t, "1.36.1", "1.35.4")
	p := startServer(t, dir, "--with-emulator", "--emulator-kube", "on", "--kube-tools", tools, "--tofu", "/nonexistent/tofu")
	versions := func(p *proc) string {
		code, prov := p.do(http.MethodGet, "/api/v1/providers/emulated", "")
		if code != http.StatusOK {
			return "absent"
		}
		b, _ := json.Marshal(prov["spec"].(map[string]any)["versions"])
		return string(b)
	}
	require.Eventually(t, func() bool { return versions(p) == `{"kubernetes":["v1.35.4","v1.36.1"]}` },
		time.Minute, 100*time.Millisecond, "the emulated provider declares the tools' Kubernetes versions")

	// A worker group of no machines: nothing runs the fake binaries.
	code, body := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"acme"},"spec":{"kubernetesVersion":"v1.35.4"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"workers"},"spec":{"role":"worker","count":0,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	patch := func(p *proc, body string) (int, domain.Status) {
		req, err := http.NewRequest(http.MethodPatch, p.url+"/api/v1/tenants/acme", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/merge-patch+json")
		resp, err := p.client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var st domain.Status
		_ = json.Unmarshal(b, &st)
		return resp.StatusCode, st
	}
	code, st := patch(p, `{"spec":{"kubernetesVersion":"v1.35.5"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, st.Message)
	require.NotNil(t, st.Details)
	require.Len(t, st.Details.Causes, 1)
	require.Equal(t, "spec.kubernetesVersion", st.Details.Causes[0].Field)
	require.Contains(t, st.Details.Causes[0].Message, `provider "emulated" runs Kubernetes v1.35.4, v1.36.1 only, not v1.35.5`)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		require.NoError(t, err, "exit status")
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop within 30s of SIGTERM")
	}
	p = startServer(t, dir, "--with-emulator", "--emulator-kube", "off", "--tofu", "/nonexistent/tofu")
	require.Eventually(t, func() bool { return versions(p) == "null" },
		time.Minute, 100*time.Millisecond, "light nodes imitate any version: the stored Provider drops its versions")
	code, st = patch(p, `{"spec":{"kubernetesVersion":"v1.35.5"}}`)
	require.Equal(t, http.StatusOK, code, st.Message)
}
