package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCredentials(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.handle("GET /api/v1/tenants/acme/kubeconfig/admin", func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write([]byte("apiVersion: v1\nkind: Config\n"))
	})
	f.handle("GET /api/v1/tenants/acme/talosconfig", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"talosconfig":"context: acme\n"}`))
	})
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	dir := t.TempDir()

	kc := filepath.Join(dir, "kube", "acme.yaml")
	assert.Equal(t, "wrote the kubeconfig of tenant \"acme\" to "+kc+"\n", tc.ok("kubeconfig", "-t", "acme", "--admin", "-o", kc))
	b, err := os.ReadFile(kc)
	require.NoError(t, err)
	assert.Equal(t, "apiVersion: v1\nkind: Config\n", string(b))
	st, _ := os.Stat(kc)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// An existing file with a looser mode is replaced 0600.
	tcf := filepath.Join(dir, "talos")
	require.NoError(t, os.WriteFile(tcf, []byte("old"), 0o644))
	tc.ok("talosconfig", "-o", tcf) // the context's tenant
	b, _ = os.ReadFile(tcf)
	assert.Equal(t, "context: acme\n", string(b), "a JSON answer's config is unwrapped")
	st, _ = os.Stat(tcf)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	assert.Equal(t, "apiVersion: v1\nkind: Config\n", tc.ok("kubeconfig", "--admin", "-o", "-"))

	r := tc.run("kubeconfig", "-t", "nope", "--admin", "-o", filepath.Join(dir, "x"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "NotFound")
	_, err = os.Stat(filepath.Join(dir, "x"))
	assert.True(t, os.IsNotExist(err), "nothing is written on failure")
}
