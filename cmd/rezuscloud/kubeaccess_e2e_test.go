//go:build e2e

package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rezuscloud/rezuscloud/internal/oidctest"
)

// ssoLogin runs rezusctl login --sso into the context named user: rezusctl
// prints the sign-in URL, and the test's "browser" signs in at the provider
// with it and is sent back to rezusctl's loopback address.
func ssoLogin(t *testing.T, op *oidctest.Provider, bin string, env []string, server, user, password string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, "--server", server, "--context", user, "login", "--sso", "--no-browser")
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var stdout strings.Builder
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stderr)
	var start string
	for start == "" && sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "http") {
			start = l
		}
	}
	require.NotEmpty(t, start, "rezusctl printed no sign-in URL")
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	jar, _ := cookiejar.New(nil)
	resp, err := op.SignIn(&http.Client{Jar: jar, Timeout: 30 * time.Second}, start, user, password)
	require.NoError(t, err)
	resp.Body.Close()
	require.NoError(t, cmd.Wait(), stdout.String())
	require.Contains(t, stdout.String(), "as "+user)
}

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
	op := oidctest.Start(t)
	op.AddUser("u-gus", "gus", "gus-secret-pw", "platform", "sre")
	secret := filepath.Join(t.TempDir(), "oidc-secret")
	require.NoError(t, os.WriteFile(secret, []byte(op.ClientSecret), 0o600))
	p := startRealKubeServer(t, t.TempDir(), "--credential-ttl", "30s",
		"--oidc-issuer", op.Issuer, "--oidc-client-id", op.ClientID, "--oidc-client-secret-file", secret)
	op.AllowRedirect(p.url + "/api/v1/auth/sso/callback")
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
	// Issue 42, finding 3, with kube-controller-manager's aggregated edit
	// role: the editor edits the workload namespaces, and reaches no
	// kube-system service account (clusterrole-aggregation-controller may
	// escalate ClusterRoles).
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "deployments", "-n", "default"}, "yes"},
		{[]string{"impersonate", "serviceaccounts", "-n", "kube-system"}, "no"},
		{[]string{"create", "serviceaccounts", "--subresource=token", "-n", "kube-system"}, "no"},
		{[]string{"create", "pods", "-n", "kube-system"}, "no"},
		{[]string{"get", "secrets", "-n", "kube-system"}, "no"},
		{[]string{"escalate", "clusterroles"}, "no"},
	} {
		got, _ = kubectl("ed", append([]string{"auth", "can-i"}, c.args...)...)
		words := strings.Fields(got) // the answer is last, after any warning
		require.NotEmpty(t, words)
		require.Equal(t, c.want, words[len(words)-1], "ed: kubectl auth can-i %s: %s", strings.Join(c.args, " "), got)
	}

	// A single sign-on user: view on the tenant through the group binding of
	// "platform"; its provider groups ride in the certificate as oidc:<group>,
	// so the cluster's own RBAC can give group "sre" more there.
	code, body = p.do("POST", "/api/v1/groupbindings", `{"metadata":{"name":"platform"},"spec":{"groups":["platform"],"bindings":[{"role":"view","tenants":["`+tenant+`"]}]}}`)
	require.Equal(t, http.StatusCreated, code, body)
	ssoLogin(t, op, bin, env, p.url, "gus", "gus-secret-pw")
	got, err = run("", bin, "--context", "gus", "kubeconfig", "-t", tenant, "-o", filepath.Join(dir, "gus.kubeconfig"))
	require.NoError(t, err, got)
	got, err = kubectl("gus", "auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}")
	require.NoError(t, err, got)
	require.Contains(t, got, "rezuscloud:view")
	require.Contains(t, got, "oidc:sre")
	_, err = admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim2"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	got, err = kubectl("gus", "delete", "pod", "victim2", "-n", "default", "--wait=false")
	require.Error(t, err, "view through the group binding: %s", got)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sre-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "oidc:sre"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := kubectl("gus", "delete", "pod", "victim2", "-n", "default", "--wait=false")
		assert.NoError(c, err, got)
	}, 30*time.Second, time.Second, "the cluster's binding of oidc:sre lets the group's members edit")

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
