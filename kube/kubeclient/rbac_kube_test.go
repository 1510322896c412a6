package kubeclient

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
	"github.com/rezuscloud/rezuscloud/talos"
)

// TestEditorsGainNoClusterPower replays issue 42's finding 3 against the
// real kube-apiserver: a tenant editor's certificate (CN the user, O
// rezuscloud:edit, as RezusCloud issues them) impersonated the
// clusterrole-aggregation-controller service account of kube-system, whose
// `escalate` on ClusterRoles let it write `*` into a role the editor holds.
// With the bindings RezusCloud keeps, the editor edits workloads in the
// cluster's workload namespaces and reads what a viewer reads, and every
// path out of those namespaces is closed; the real kubectl judges each.
func TestEditorsGainNoClusterPower(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	admin, err := kubernetes.NewForConfig(env.AdminConfig)
	require.NoError(t, err)

	// Namespaces a cluster's admins made: one for apps, one an operator
	// whose service account holds cluster-admin (flux's
	// kustomize-controller does), one labelled privileged for Pod Security
	// (a CSI driver's), one its admins keep editors out of.
	for _, ns := range []corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "apps"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "csi", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "billing", Labels: map[string]string{EditorsLabel: EditorsDeny}}},
	} {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &ns, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "flux"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "flux-system", Name: "kustomize-controller"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The bindings of an existing cluster, as RezusCloud made them before:
	// the editors' group bound cluster-wide to edit.
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: talos.KubeGroupEdit},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: talos.KubeGroupEdit}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	aggregateClusterRoles(t, admin)
	_, err = ensureBindings(ctx, admin)
	require.NoError(t, err)

	editor := env.ClientFor("ed", talos.KubeGroupEdit)
	kubeconfig := writeKubeconfig(t, editor)
	canI := func(args ...string) string {
		cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig, "auth", "can-i"}, args...)...)
		out, _ := cmd.Output() // exit 1 is "no"; warnings go to stderr
		return strings.TrimSpace(string(out))
	}
	checks := []struct {
		args []string
		want string
	}{
		// What an editor is for, in the cluster's workload namespaces; a
		// namespace made after the first check gets its binding at the next.
		{[]string{"create", "deployments", "-n", "default"}, "yes"},
		{[]string{"delete", "pods", "-n", "apps"}, "yes"},
		{[]string{"get", "secrets", "-n", "apps"}, "yes"},
		// Kubernetes's edit there: the power of that namespace's service
		// accounts, which hold no cluster-wide role.
		{[]string{"impersonate", "serviceaccounts", "-n", "apps"}, "yes"},
		// What a viewer reads, everywhere.
		{[]string{"list", "pods", "-n", "kube-system"}, "yes"},
		{[]string{"list", "deployments", "--all-namespaces"}, "yes"},

		// The attack: a kube-system service account, by impersonation or a token.
		{[]string{"impersonate", "serviceaccounts", "-n", "kube-system"}, "no"},
		{[]string{"impersonate", "serviceaccounts/clusterrole-aggregation-controller", "-n", "kube-system"}, "no"},
		{[]string{"create", "serviceaccounts", "--subresource=token", "-n", "kube-system"}, "no"},
		// RBAC.
		{[]string{"escalate", "clusterroles"}, "no"},
		{[]string{"bind", "clusterroles"}, "no"},
		{[]string{"update", "clusterroles"}, "no"},
		{[]string{"create", "clusterrolebindings"}, "no"},
		{[]string{"create", "rolebindings", "-n", "default"}, "no"},
		{[]string{"create", "roles", "-n", "apps"}, "no"},
		// kube-system itself: its secrets, pods (any of its service
		// accounts, exempt from Pod Security), workloads, exec.
		{[]string{"get", "secrets", "-n", "kube-system"}, "no"},
		{[]string{"list", "secrets", "--all-namespaces"}, "no"},
		{[]string{"create", "pods", "-n", "kube-system"}, "no"},
		{[]string{"create", "daemonsets", "-n", "kube-system"}, "no"},
		{[]string{"create", "pods", "--subresource=exec", "-n", "kube-system"}, "no"},
		{[]string{"create", "pods", "-n", "kube-node-lease"}, "no"},
		// Namespaces whose service accounts hold cluster-wide roles, that
		// allow privileged pods, or that their admins keep editors out of.
		{[]string{"create", "pods", "-n", "flux-system"}, "no"},
		{[]string{"impersonate", "serviceaccounts", "-n", "flux-system"}, "no"},
		{[]string{"create", "serviceaccounts", "--subresource=token", "-n", "flux-system"}, "no"},
		{[]string{"create", "pods", "-n", "csi"}, "no"},
		{[]string{"get", "secrets", "-n", "billing"}, "no"},
		// Cluster-scoped ways up: namespaces' Pod Security labels, nodes,
		// certificates, admission webhooks.
		{[]string{"patch", "namespaces/apps"}, "no"},
		{[]string{"create", "namespaces"}, "no"},
		{[]string{"get", "nodes", "--subresource=proxy"}, "no"},
		{[]string{"create", "certificatesigningrequests"}, "no"},
		{[]string{"update", "certificatesigningrequests", "--subresource=approval"}, "no"},
		{[]string{"update", "signers", "--all-namespaces"}, "no"},
		{[]string{"create", "mutatingwebhookconfigurations"}, "no"},
		{[]string{"create", "validatingadmissionpolicies"}, "no"},
		{[]string{"create", "persistentvolumes"}, "no"},
	}
	// kube-apiserver's authorizer follows RBAC objects through an informer:
	// a binding just replaced may still count for a moment.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, tc := range checks {
			assert.Equal(c, tc.want, canI(tc.args...), "kubectl auth can-i %s", strings.Join(tc.args, " "))
		}
	}, 30*time.Second, 500*time.Millisecond)

	// The attack as the review ran it: impersonate the controller that may
	// escalate ClusterRoles, and give the editors' role every permission.
	imp := rest.CopyConfig(editor)
	imp.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:clusterrole-aggregation-controller"}
	as, err := kubernetes.NewForConfig(imp)
	require.NoError(t, err)
	all := rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}
	role, err := as.RbacV1().ClusterRoles().Get(ctx, "view", metav1.GetOptions{})
	if err == nil {
		role.Rules = append(role.Rules, all)
		_, err = as.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
	}
	assert.True(t, apierrors.IsForbidden(err), "impersonating a kube-system service account is refused (%v)", err)
	role, err = admin.RbacV1().ClusterRoles().Get(ctx, "view", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotContains(t, role.Rules, all, "the editors' role was not given every permission")
}

// aggregateClusterRoles stands in for kube-controller-manager's
// clusterrole-aggregation controller (kubetest runs none): every ClusterRole
// with an aggregationRule gets the rules of the ClusterRoles its selectors
// match, as in a cluster (edit then may impersonate service accounts).
// Aggregated roles aggregate others (edit takes view's), so it goes round
// until nothing changes, as the controller's requeues do.
func aggregateClusterRoles(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	for changed := true; changed; {
		changed = false
		roles, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, r := range roles.Items {
			if r.AggregationRule == nil {
				continue
			}
			var rules []rbacv1.PolicyRule
			for _, sel := range r.AggregationRule.ClusterRoleSelectors {
				s, err := metav1.LabelSelectorAsSelector(&sel)
				require.NoError(t, err)
				parts, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: s.String()})
				require.NoError(t, err)
				for _, p := range parts.Items {
					if p.Name == r.Name {
						continue
					}
					for _, rule := range p.Rules {
						if !slices.ContainsFunc(rules, func(have rbacv1.PolicyRule) bool { return equalRules(have, rule) }) {
							rules = append(rules, rule)
						}
					}
				}
			}
			if slices.EqualFunc(rules, r.Rules, equalRules) {
				continue
			}
			r.Rules, changed = rules, true
			_, err := cs.RbacV1().ClusterRoles().Update(ctx, &r, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
	}
	got, err := cs.RbacV1().ClusterRoles().Get(ctx, "edit", metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(got.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Verbs, "impersonate") }),
		"the aggregated edit role may impersonate, as in a cluster")
	require.True(t, slices.ContainsFunc(got.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "pods") && slices.Contains(r.Verbs, "list")
	}), "and reads what view reads")
}

func equalRules(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.NonResourceURLs, b.NonResourceURLs)
}

// writeKubeconfig writes cfg (a client certificate) as a kubeconfig file for kubectl.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	require.NoError(t, os.Chmod(path, 0o600))
	return path
}
