package main

import (
	"encoding/json"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestKubernetesCredentialPlugin: the exec plugin prints the server's
// ExecCredential, serves it from its cache (mode 0600) while it has more
// than a minute left, asks again after, and keeps nothing once refused.
func TestKubernetesCredentialPlugin(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	var calls atomic.Int32
	ttl := time.Hour
	refuse := atomic.Bool{}
	f.handle("POST /api/v1/tenants/acme/kubernetes/credential", func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
		if refuse.Load() {
			writeStatus(w, domain.NewNotFound("Tenant", "acme"))
			return
		}
		n := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
			"status": map[string]any{"expirationTimestamp": tc.now.Add(ttl).Format(time.RFC3339),
				"clientCertificateData": "CERT " + string(rune('0'+n)), "clientKeyData": "KEY"}})
	})
	first := tc.ok("credential", "kubernetes", "-t", "acme")
	require.Contains(t, first, `"kind":"ExecCredential"`)
	require.Contains(t, first, "CERT 1")
	require.Equal(t, first, tc.ok("credential", "kubernetes", "-t", "acme"), "served from the cache")
	require.EqualValues(t, 1, calls.Load())
	matches, err := os.ReadDir(tc.env["HOME"] + "/.cache/rezus/credentials")
	require.NoError(t, err)
	require.Len(t, matches, 1)
	info, err := matches[0].Info()
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the cache holds a private key")

	require.Contains(t, tc.ok("credential", "kubernetes", "-t", "acme", "--no-cache"), "CERT 2")
	// Less than 10 s left: asked again.
	ttl = 5 * time.Second
	require.Contains(t, tc.ok("credential", "kubernetes", "-t", "acme", "--no-cache"), "CERT 3")
	require.Contains(t, tc.ok("credential", "kubernetes", "-t", "acme"), "CERT 4")

	refuse.Store(true)
	r := tc.run("credential", "kubernetes", "-t", "acme", "--no-cache")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "NotFound")
	matches, err = os.ReadDir(tc.env["HOME"] + "/.cache/rezus/credentials")
	require.NoError(t, err)
	require.Empty(t, matches, "a refused caller keeps nothing")
}

// TestKubeconfigRunsThisRezusctl: the kubeconfig written holds the server's
// cluster and an exec plugin pointed at this rezusctl with the login it was
// written from; --admin asks for the break-glass one as it is.
func TestKubeconfigRunsThisRezusctl(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	f.handle("GET /api/v1/tenants/acme/kubeconfig", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`apiVersion: v1
kind: Config
clusters:
- name: "acme"
  cluster:
    server: "https://10.0.0.10:6443"
    certificate-authority-data: Q0E=
users:
- name: "ed@acme"
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: "rezusctl"
      args:
      - "credential"
      - "kubernetes"
      - "--tenant"
      - "acme"
      interactiveMode: Never
      provideClusterInfo: false
contexts:
- name: "ed@acme"
  context:
    cluster: "acme"
    user: "ed@acme"
current-context: "ed@acme"
`))
	})
	f.handle("GET /api/v1/tenants/acme/kubeconfig/admin", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("apiVersion: v1\nkind: Config\nusers:\n- name: admin@acme\n  user:\n    client-key-data: S0VZ\n"))
	})
	out := tc.ok("kubeconfig", "-t", "acme", "-o", "-")
	var kc struct {
		Users []struct {
			User struct {
				Exec struct {
					Command string
					Args    []string
					Env     []struct{ Name, Value string }
				}
			}
		}
		Clusters []struct {
			Cluster struct{ Server string }
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &kc))
	require.Len(t, kc.Users, 1)
	exe, err := os.Executable()
	require.NoError(t, err)
	ex := kc.Users[0].User.Exec
	require.Equal(t, exe, ex.Command)
	require.Equal(t, []string{"--context", "test", "credential", "kubernetes", "--tenant", "acme"}, ex.Args)
	require.Equal(t, []struct{ Name, Value string }{{"REZUSCONFIG", tc.config}}, ex.Env)
	require.Equal(t, "https://10.0.0.10:6443", kc.Clusters[0].Cluster.Server)

	require.Contains(t, tc.ok("kubeconfig", "-t", "acme", "--admin", "-o", "-"), "client-key-data: S0VZ")
}
