//go:build !e2e && !browser

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
	"github.com/rezuscloud/rezuscloud/internal/release"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// dataFormat reads the format record of a stopped server's data dir.
func dataFormat(t *testing.T, dataDir string) *eventstore.Format {
	t.Helper()
	rec, stop := openFormat(t, dataDir)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, _, err := rec.Get(ctx)
	require.NoError(t, err)
	return f
}

// openFormat opens the format record of a stopped server's data dir on an
// embedded NATS server of the test's own.
func openFormat(t *testing.T, dataDir string) (*eventstore.FormatRecord, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	emb, err := eventstore.StartEmbedded(eventstore.EmbeddedConfig{DataDir: dataDir})
	require.NoError(t, err)
	nc, err := emb.Connect("downgrade-test")
	require.NoError(t, err)
	store, err := eventstore.Open(ctx, nc, eventstore.Config{})
	require.NoError(t, err)
	rec, err := eventstore.OpenFormat(ctx, store)
	require.NoError(t, err)
	return rec, func() {
		nc.Close()
		emb.Shutdown(context.Background())
	}
}

// stopServer ends p with SIGTERM and requires a clean exit.
func stopServer(t *testing.T, p *proc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		require.NoError(t, err, "exit status")
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop within 30s of SIGTERM")
	}
}

// TestDowngradeRefusedByTheGuard: on data whose format record says only
// 9.0.0 and later read it, this build refuses to start, exits non-zero
// and says which version to run; the record is left as it was.
func TestDowngradeRefusedByTheGuard(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec, stop := openFormat(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := rec.Open(ctx, "9.0.1", "9.0.0")
	require.NoError(t, err)
	stop()

	p := launchServer(t, dir, "--tofu", "/nonexistent/tofu")
	var exit error
	select {
	case exit = <-p.done:
		p.done <- exit
	case <-time.After(startWithin):
		t.Fatalf("server still running %s after its start on data it must not read:\n%s", startWithin, p.log())
	}
	var ee *exec.ExitError
	require.ErrorAs(t, exit, &ee, "a refusal is a non-zero exit")
	assert.NotZero(t, ee.ExitCode())
	assert.Contains(t, p.log(), "rezuscloud: this data needs RezusCloud 9.0.0 or later (it was last written by 9.0.1); "+
		"run that version, or restore a backup taken before the upgrade\n")
	assert.Equal(t, &eventstore.Format{MinReader: "9.0.0", WrittenBy: "9.0.1"}, dataFormat(t, dir), "a refused start writes no record")
}

// TestDowngradeToTheLastRelease starts the previous release (CHANGELOG.md:
// 0.1.0, built from its commit) on data this build wrote, and records
// what really happens. 0.1.0 has no guard, so it cannot refuse: it starts,
// serves /readyz and reads the tenant, its node group and the Provider
// with 0.2.0's spec.versions (it keeps specs as the JSON it read); an API
// write of that Provider through it is refused with a 400 naming
// spec.versions rather than stored without it, and this build, started
// again, finds everything whole. docs/operations.md says so.
func TestDowngradeToTheLastRelease(t *testing.T) {
	t.Parallel()
	root, err := tofutest.RepoRoot()
	require.NoError(t, err)
	prevVersion, prevCommit, err := release.Previous(root)
	require.NoError(t, err)
	old := release.Server(t, prevVersion, prevCommit)
	dir := t.TempDir()
	infra := []string{"--tofu", "/nonexistent/tofu"}

	// This build writes a tenant with a node group on a Provider that
	// declares its versions (a field 0.1.0 does not know).
	p := startServer(t, dir, infra...)
	_, v := p.do(http.MethodGet, "/version", "")
	require.Equal(t, buildinfo.Version(), v["version"])
	code, body := p.do(http.MethodPost, "/api/v1/providers",
		`{"metadata":{"name":"emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:1"},"versions":{"kubernetes":["v1.35.4"]}}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"acme"},"spec":{"kubernetesVersion":"v1.35.4"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"workers"},"spec":{"role":"worker","count":0,"provider":"emu"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	stopServer(t, p)
	assert.Equal(t, &eventstore.Format{MinReader: "0.2.0", WrittenBy: buildinfo.Version()}, dataFormat(t, dir),
		"a single server writes 0.2.0's fields at once: only 0.2.0 and later read everything")

	// The previous release starts on it: it has no guard.
	prev := launch(t, old, nil, dir, infra...)
	prev.waitReady(dir) // 0.1.0 serves /readyz on 0.2.0's data
	_, v = prev.do(http.MethodGet, "/version", "")
	t.Logf("the previous release (%s, commit %s) says it is %v", prevVersion, prevCommit, v["version"])
	code, ten := prev.do(http.MethodGet, "/api/v1/tenants/acme", "")
	require.Equal(t, http.StatusOK, code, ten)
	code, ng := prev.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", "")
	require.Equal(t, http.StatusOK, code, ng)
	assert.Equal(t, "emu", ng["spec"].(map[string]any)["provider"])
	// 0.1.0 keeps spec and status as the JSON it read, so it shows the
	// field it does not know ...
	code, prov := prev.do(http.MethodGet, "/api/v1/providers/emu", "")
	require.Equal(t, http.StatusOK, code, prov)
	assert.Equal(t, map[string]any{"kubernetes": []any{"v1.35.4"}}, prov["spec"].(map[string]any)["versions"])

	// ... but decodes a spec strictly before it writes one: a write through
	// it is refused (400 on the field), not stored without the field.
	req, err := http.NewRequest(http.MethodPatch, prev.url+"/api/v1/providers/emu", bytes.NewReader([]byte(`{"metadata":{"labels":{"touched":"by-0.1.0"}}}`)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(answer))
	assert.Contains(t, string(answer), `"field":"spec.versions","message":"unknown field"`)
	stopServer(t, prev)
	assert.Equal(t, &eventstore.Format{MinReader: "0.2.0", WrittenBy: buildinfo.Version()}, dataFormat(t, dir),
		"0.1.0 knows no format record and leaves it alone")

	// Back on this build, the data is whole.
	p = startServer(t, dir, infra...)
	code, prov = p.do(http.MethodGet, "/api/v1/providers/emu", "")
	require.Equal(t, http.StatusOK, code, prov)
	assert.Equal(t, map[string]any{"kubernetes": []any{"v1.35.4"}}, prov["spec"].(map[string]any)["versions"])
	assert.NotContains(t, prov["metadata"], "labels")
	code, ng = p.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", "")
	require.Equal(t, http.StatusOK, code, ng)
}
