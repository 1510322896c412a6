package main

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// backup create posts a manual EtcdBackup and, with --wait, reports it;
// backup download writes the snapshot 0600 only once it arrived whole and
// matches its sha256; restore posts to /restore and waits for the run.
func TestBackupAndRestoreCommands(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	snapshot := []byte("an etcd snapshot, opaque to the CLI: secret bytes")
	sum := sha256.Sum256(snapshot)

	f.handle("POST /api/v1/tenants/acme/etcdbackups", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"apiVersion":"rezuscloud.io/v1","kind":"EtcdBackup","metadata":{"name":"manual-20260501-120000","tenant":"acme"},"spec":{"trigger":"manual"},"status":{"phase":"Pending"}}`))
	})
	f.handle("GET /api/v1/tenants/acme/etcdbackups/manual-20260501-120000", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"apiVersion":"rezuscloud.io/v1","kind":"EtcdBackup","metadata":{"name":"manual-20260501-120000","tenant":"acme"},"spec":{"trigger":"manual"},` +
			`"status":{"phase":"Succeeded","size":3145728,"member":"cp-2","etcdRevision":42}}`))
	})
	res := tc.run("backup", "create", "--wait")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "etcdbackup/manual-20260501-120000 created")
	assert.Contains(t, res.stdout, "Succeeded: 3.0MiB from cp-2, revision 42")
	assert.JSONEq(t, `{"metadata":{"name":"manual-20260501-120000"},"spec":{"trigger":"manual"}}`, string(f.bodies["POST /api/v1/tenants/acme/etcdbackups"]))

	serve := func(body []byte, length int, digest string) {
		f.handle("GET /api/v1/tenants/acme/etcdbackups/b1/snapshot", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(length))
			w.Header().Set("X-Snapshot-Sha256", digest)
			_, _ = w.Write(body)
		})
	}
	out := filepath.Join(t.TempDir(), "acme.snapshot")
	serve(snapshot, len(snapshot), hex.EncodeToString(sum[:]))
	res = tc.run("backup", "download", "b1", "-o", out)
	require.Equal(t, 0, res.code, res.stderr)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, snapshot, got)
	fi, err := os.Stat(out)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	other := filepath.Join(t.TempDir(), "bad.snapshot")
	serve(snapshot, len(snapshot), hex.EncodeToString(make([]byte, 32)))
	res = tc.run("backup", "download", "b1", "-o", other)
	require.NotEqual(t, 0, res.code)
	assert.Contains(t, res.stderr, "does not match its sha256")
	_, err = os.Stat(other)
	require.True(t, os.IsNotExist(err), "nothing written")

	f.handle("POST /api/v1/tenants/acme/restore", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"apiVersion":"rezuscloud.io/v1","kind":"Restore","metadata":{"name":"restore-1","tenant":"acme"},"spec":{"backup":"b1"},"status":{"phase":"Pending"}}`))
	})
	f.handle("GET /api/v1/tenants/acme/restores/restore-1", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"apiVersion":"rezuscloud.io/v1","kind":"Restore","metadata":{"name":"restore-1","tenant":"acme"},"spec":{"backup":"b1"},` +
			`"status":{"phase":"Failed","stage":"Verifying","reason":"backup \"b1\" cannot be restored: sealed stream damaged"}}`))
	})
	res = tc.run("restore", "--backup", "b1", "--wait")
	require.NotEqual(t, 0, res.code)
	assert.Contains(t, res.stdout, `restore/restore-1 created: tenant "acme" from backup "b1"`)
	assert.Contains(t, res.stderr, "sealed stream damaged")
	assert.JSONEq(t, `{"backup":"b1"}`, string(f.bodies["POST /api/v1/tenants/acme/restore"]))
}
