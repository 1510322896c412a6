//go:build e2e

// The backup of 10,000 tenants and its restore take over two minutes with
// the race detector on a shared machine: an end-to-end test.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// runCLI runs the test binary as the rezuscloud command with args and
// returns its combined output.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "REZUS_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tenantVersions lists every tenant of a server: name -> resourceVersion,
// and the list's resourceVersion.
func tenantVersions(t *testing.T, p *proc) (map[string]string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.url+"/api/v1/tenants", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := p.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []domain.Object `json:"items"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	out := make(map[string]string, len(list.Items))
	for _, o := range list.Items {
		out[o.Metadata.Name] = o.Metadata.ResourceVersion
	}
	return out, list.Metadata.ResourceVersion
}

// TestBackupWhileServingAndRestore backs up a server holding 10,000 tenants
// while it serves, restores the archive into a new data dir on "another
// machine" (a new dir and a copy of the sealing key), and starts a server
// there: the same objects at the same resourceVersions, and a watch from a
// resourceVersion taken before the backup resumes right after it.
func TestBackupWhileServingAndRestore(t *testing.T) {
	t.Parallel() // its own data dirs and free ports
	const tenants = 10_000
	src := filepath.Join(t.TempDir(), "src")
	env := eventstoretest.Start(t, src)
	env.Populate(t, domain.TenantKind, "", "t", tenants, `{}`)
	env.Stop()

	p := startServer(t, src)
	before, rv0 := tenantVersions(t, p)
	require.Len(t, before, tenants)
	code, obj := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"after-rv0"}}`)
	require.Equal(t, http.StatusCreated, code)
	afterRV := obj["metadata"].(map[string]any)["resourceVersion"].(string)
	want, _ := tenantVersions(t, p)
	require.Len(t, want, tenants+1)

	// An offline backup is refused while the server runs on the data dir.
	archive := filepath.Join(t.TempDir(), "rezuscloud.tar")
	out, err := runCLI(t, "backup", "--data-dir", src, "--to", archive)
	require.Error(t, err, out)
	require.Contains(t, out, "in use by a running rezuscloud server")

	// Online, through the admin API; a view-only token would be refused (handlers' route × role test).
	started := time.Now()
	out, err = runCLI(t, "backup", "--server", p.url, "--token", token, "--to", archive)
	require.NoError(t, err, out)
	backupTook := time.Since(started)
	st, err := os.Stat(archive)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// The source keeps serving the same objects.
	got, _ := tenantVersions(t, p)
	require.Equal(t, want, got)

	dst := filepath.Join(t.TempDir(), "dst")
	require.NoError(t, os.MkdirAll(dst, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dst, "stray"), nil, 0o600))
	out, err = runCLI(t, "restore", "--from", archive, "--data-dir", dst)
	require.Error(t, err, out)
	require.Contains(t, out, "is not empty")
	require.NoError(t, os.Remove(filepath.Join(dst, "stray")))
	started = time.Now()
	out, err = runCLI(t, "restore", "--from", archive, "--data-dir", dst)
	require.NoError(t, err, out)
	restoreTook := time.Since(started)
	require.Contains(t, out, "secrets are still sealed")

	// The sealing key travels on its own, never in the archive: without it
	// the restored server refuses to start.
	ctx, cancel := context.WithTimeout(t.Context(), startWithin)
	defer cancel()
	wrong := exec.CommandContext(ctx, os.Args[0], "serve", "--data-dir", dst, "--listen", "127.0.0.1:0",
		"--secrets-key-file", filepath.Join(t.TempDir(), "new.key"))
	wrong.Env = append(os.Environ(), "REZUS_TEST_MAIN=1")
	wrongOut, err := wrong.CombinedOutput()
	require.Error(t, err, string(wrongOut))
	require.Contains(t, string(wrongOut), "does not open with this key")
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	key, err := os.ReadFile(filepath.Join(src, "secrets.key"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keyFile, key, 0o600))
	p2 := startServer(t, dst, "--secrets-key-file", keyFile)
	got, _ = tenantVersions(t, p2)
	require.Equal(t, want, got, "the restored server serves every tenant at its resourceVersion")
	require.Contains(t, p2.log(), "cache: loaded the projections", "the read model started from the restored projections")

	// A watch from before the backup resumes exactly after it.
	req, err := http.NewRequest(http.MethodGet, p2.url+"/api/v1/tenants?watch=true&resourceVersion="+rv0, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := p2.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var first struct {
		Type   string        `json:"type"`
		Object domain.Object `json:"object"`
	}
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			require.NoError(t, json.Unmarshal([]byte(data), &first))
			if first.Type != "BOOKMARK" {
				break
			}
		}
	}
	require.Equal(t, "ADDED", first.Type)
	require.Equal(t, "after-rv0", first.Object.Metadata.Name)
	require.Equal(t, afterRV, first.Object.Metadata.ResourceVersion)

	// Offline, once the server is stopped: the same events.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-p.done)
	offline := filepath.Join(t.TempDir(), "offline.tar.gz")
	out, err = runCLI(t, "backup", "--data-dir", src, "--to", offline)
	require.NoError(t, err, out)
	f, err := os.Open(offline)
	require.NoError(t, err)
	defer f.Close()
	m, err := eventstore.VerifyBackup(f)
	require.NoError(t, err)
	require.Equal(t, "offline", m.Source.Mode)
	ost, err := os.Stat(offline)
	require.NoError(t, err)

	t.Logf("figures: %d tenants; online backup %s, %d bytes (%s); restore %s; offline backup gzip %d bytes",
		tenants+1, backupTook.Round(time.Millisecond), st.Size(), fmt.Sprintf("%.1f MiB", float64(st.Size())/(1<<20)),
		restoreTook.Round(time.Millisecond), ost.Size())
}
