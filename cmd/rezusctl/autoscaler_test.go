package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// autoscaler config issues a certificate and writes what the
// cluster-autoscaler's externalgrpc provider reads: a cloud-config naming
// the endpoint and the three files, the files 0600.
func TestAutoscalerConfig(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.handle("POST /api/v1/tenants/acme/autoscaler/certificates", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]string
		assert.NoError(t, json.Unmarshal(body, &req))
		assert.Equal(t, "48h", req["validity"])
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"serial":"ab12","notAfter":"2026-12-08T12:00:00Z","tenant":"acme","endpoint":"rezus.example:8086",` +
			`"certificate":"CERT\n","key":"KEY\n","ca":"CA\n"}`))
	})
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	dir := filepath.Join(t.TempDir(), "auto")
	out := tc.ok("autoscaler", "config", "-t", "acme", "-o", dir, "--validity", "48h")
	assert.Contains(t, out, "certificate ab12")
	var cfg struct {
		Address, Cert, Key, Cacert string
		GRPCTimeout                string `json:"grpc_timeout"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cloud-config"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	assert.Equal(t, "rezus.example:8086", cfg.Address)
	assert.Equal(t, "/etc/rezuscloud-autoscaler/tls.crt", cfg.Cert)
	assert.Equal(t, "/etc/rezuscloud-autoscaler/tls.key", cfg.Key)
	assert.Equal(t, "/etc/rezuscloud-autoscaler/ca.crt", cfg.Cacert)
	assert.Equal(t, "10s", cfg.GRPCTimeout)
	for name, want := range map[string]string{"tls.crt": "CERT\n", "tls.key": "KEY\n", "ca.crt": "CA\n"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, want, string(b))
		st, _ := os.Stat(filepath.Join(dir, name))
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), name)
	}

	// --mount-dir "": the files where they were written.
	dir2 := filepath.Join(t.TempDir(), "local")
	tc.ok("autoscaler", "config", "-t", "acme", "-o", dir2, "--validity", "48h", "--mount-dir", "")
	raw, err = os.ReadFile(filepath.Join(dir2, "cloud-config"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	assert.Equal(t, filepath.Join(dir2, "tls.key"), cfg.Key)

	f.handle("POST /api/v1/tenants/nope/autoscaler/certificates", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"tenant \"nope\" not found","reason":"NotFound","code":404}`))
	})
	x := filepath.Join(t.TempDir(), "x")
	r := tc.run("autoscaler", "config", "-t", "nope", "-o", x)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "not found")
	_, err = os.Stat(x)
	assert.True(t, os.IsNotExist(err), "nothing is written on failure")
}
