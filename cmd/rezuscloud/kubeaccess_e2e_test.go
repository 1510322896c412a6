//go:build e2e

package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cachedCredentialEnd is when the one credential cached under dir ends.
func cachedCredentialEnd(t *testing.T, dir string) time.Time {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "rezus", "credentials", "kubernetes-*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var latest time.Time
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var ec struct {
			Status struct{ ExpirationTimestamp time.Time }
		}
		require.NoError(t, json.Unmarshal(b, &ec))
		if ec.Status.ExpirationTimestamp.After(latest) {
			latest = ec.Status.ExpirationTimestamp
		}
	}
	return latest
}

// TestPerUserKubernetesCredentials: against the real kube-apiserver of an
// emulated cluster, with credentials of 30 s. Users log in with the real
// rezusctl (built from this tree) and write their kubeconfig; kubectl runs
// rezusctl as its exec plugin. A view user lists pods in every namespace and
// may not delete one; an edit user may. Once the view user's binding is
// removed, the plugin's next request is refused, and once the cached
// certificate ends kubectl is refused too. The break-glass kubeconfig is the
// global admin's only, and every issuance is audited.
func TestPerUserKubernetesCredentials(t *testing.T) {
	t.Parallel()
	p := startRealKubeServer(t, t.TempDir(), "--credential-ttl", "30s")
	const tenant = "ka"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"talosVersion":"v1.13.0"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emulated"}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	const password = "a password long enough for the policy"
	for _, u := range []struct{ name, role string }{{"vic", "view"}, {"ed", "edit"}} {
		code, body = p.do("POST", "/api/v1/users", `{"metadata":{"name":"`+u.name+`"},"spec":{"role":"none","password":"`+password+
			`","bindings":[{"role":"`+u.role+`","tenants":["`+tenant+`"]}]}}`)
		require.Equal(t, http.StatusCreated, code, body)
	}
	p.settled(tenant, 2)
	admin := tenantKube(t, p, tenant)
	requireNodesReady(t, admin, 2, realKubeFrom)
	ctx := t.Context()

	dir := t.TempDir()
	bin := filepath.Join(dir, "rezusctl")
	out, err := exec.Command("go", "build", "-o", bin, "../rezusctl").CombinedOutput()
	require.NoError(t, err, string(out))
	env := append(os.Environ(), "HOME="+dir, "REZUSCONFIG="+filepath.Join(dir, "rezus", "config"))
	cacheOf := func(user string) string { return filepath.Join(dir, "cache-"+user) }
	runAs := func(user, stdin, name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env, cmd.Stdin = append(env, "XDG_CACHE_HOME="+cacheOf(user)), strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run := func(stdin, name string, args ...string) (string, error) { return runAs("", stdin, name, args...) }
	kubectl := func(user string, args ...string) (string, error) {
		return runAs(user, "", "kubectl", append([]string{"--kubeconfig", filepath.Join(dir, user+".kubeconfig"), "--request-timeout", "20s"}, args...)...)
	}
	for _, u := range []string{"vic", "ed"} {
		out, err := run(password+"\n", bin, "--server", p.url, "--context", u, "login", "-u", u, "--password-stdin")
		require.NoError(t, err, out)
		out, err = run("", bin, "--context", u, "kubeconfig", "-t", tenant, "-o", filepath.Join(dir, u+".kubeconfig"))
		require.NoError(t, err, out)
		kc, err := os.ReadFile(filepath.Join(dir, u+".kubeconfig"))
		require.NoError(t, err)
		require.NotContains(t, string(kc), "client-key-data", "the kubeconfig holds no key")
	}

	_, err = admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	got, err := kubectl("vic", "get", "pods", "-A")
	require.NoError(t, err, got)
	require.Contains(t, got, "victim")
	got, err = kubectl("vic", "delete", "pod", "victim", "-n", "default", "--wait=false")
	require.Error(t, err, got)
	require.Contains(t, got, "forbidden")
	require.Contains(t, got, `User "vic"`)
	got, err = kubectl("ed", "delete", "pod", "victim", "-n", "default", "--wait=false")
	require.NoError(t, err, got)
	got, err = kubectl("ed", "auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}")
	require.NoError(t, err, got)
	require.Contains(t, got, "rezuscloud:edit")

	// The break-glass kubeconfig: the global admin's, not a tenant user's.
	got, err = run("", bin, "--context", "vic", "kubeconfig", "-t", tenant, "--admin", "-o", "-")
	require.Error(t, err, got)
	require.Contains(t, got, "Forbidden")

	// vic loses the binding. The certificate vic's plugin holds works until
	// it ends (Kubernetes cannot revoke one: the lifetime is the bound);
	// then the plugin asks again, is refused, and so is kubectl.
	ends := cachedCredentialEnd(t, cacheOf("vic"))
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/users/vic", `{"spec":{"bindings":[]}}`))
	removed := time.Now()
	if time.Until(ends) > 15*time.Second {
		got, err = kubectl("vic", "get", "pods", "-A")
		require.NoError(t, err, "the cached certificate still works until it ends: %s", got)
	} else {
		t.Logf("the cached certificate ends in %s: too soon to check it still works", time.Until(ends).Round(time.Second))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl("vic", "get", "pods", "-A")
		assert.Error(c, err, out)
	}, time.Minute, 2*time.Second, "kubectl is refused once the credential ends")
	refusedAt := time.Now()
	require.True(t, refusedAt.After(ends.Add(-11*time.Second)), "refused only once the cached certificate was within the plugin's 10 s margin of its end (%s)", ends)
	got, err = runAs("vic", "", bin, "--context", "vic", "credential", "kubernetes", "-t", tenant, "--no-cache")
	require.Error(t, err, got)
	require.Contains(t, got, "NotFound")
	t.Logf("figures: kubectl refused %s after the binding was removed (credential lifetime 30s)", refusedAt.Sub(removed).Round(time.Second))

	// Every issuance is in the audit log, by user.
	var audit struct {
		Items []struct {
			Actor, Kind string
			Code        int
		}
	}
	require.NoError(t, json.Unmarshal(p.raw("/api/v1/audit?limit=1000"), &audit))
	issued := map[string]int{}
	for _, r := range audit.Items {
		if r.Kind == "KubernetesCredential" && r.Code == http.StatusCreated {
			issued[r.Actor]++
		}
	}
	require.Positive(t, issued["vic"])
	require.Positive(t, issued["ed"])
}
