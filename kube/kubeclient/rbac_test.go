package kubeclient

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rezuscloud/rezuscloud/talos"
)

func TestEnsureBindings(t *testing.T) {
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	edit := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"}
	editors := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: talos.KubeGroupEdit}}
	// A cluster bound by an earlier release (editors on edit cluster-wide),
	// where someone pointed the view group at cluster-admin, added a
	// subject to the edit binding, bound editors in kube-system and gave
	// them admin in apps; an operator's service account holds a
	// ClusterRoleBinding; a namespace is being deleted.
	cs := fake.NewClientset(
		ns("default", nil), ns("kube-system", nil), ns("apps", nil), ns("flux-system", nil),
		ns("csi", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "leaving"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: talos.KubeGroupView},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: talos.KubeGroupView}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: talos.KubeGroupEdit}, RoleRef: edit,
			Subjects: append(slices.Clone(editors), rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"})},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "flux"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "flux-system", Name: "kustomize-controller"}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: talos.KubeGroupEdit, Namespace: "kube-system"}, RoleRef: edit, Subjects: editors},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: talos.KubeGroupEdit, Namespace: "apps"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"}, Subjects: editors},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: talos.KubeGroupEdit, Namespace: "leaving"}, RoleRef: edit, Subjects: editors},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ops", Namespace: "kube-system"}, RoleRef: edit, Subjects: editors},
	)
	for range 2 { // twice: the second finds everything in place
		probe, err := ensureBindings(t.Context(), cs)
		require.NoError(t, err)
		require.Equal(t, "default", probe)
		for group, role := range map[string]string{talos.KubeGroupAdmin: "cluster-admin", talos.KubeGroupEdit: "view", talos.KubeGroupView: "view"} {
			got, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), group, metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, role, got.RoleRef.Name, group)
			require.Equal(t, []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}}, got.Subjects, group)
		}
		rbs, err := cs.RbacV1().RoleBindings(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		got := map[string]string{}
		for _, rb := range rbs.Items {
			got[rb.Namespace+"/"+rb.Name] = rb.RoleRef.Name
			if rb.Name == talos.KubeGroupEdit {
				require.Equal(t, editors, rb.Subjects)
			}
		}
		require.Equal(t, map[string]string{
			"default/" + talos.KubeGroupEdit: "edit",
			"apps/" + talos.KubeGroupEdit:    "edit",
			"leaving/" + talos.KubeGroupEdit: "edit", // goes with its namespace
			"kube-system/ops":                "edit", // not ours: left alone
		}, got)
	}

	t.Run("no editable namespace: the editors' probe is a viewer's", func(t *testing.T) {
		cs := fake.NewClientset(ns("kube-system", nil), ns("default", map[string]string{EditorsLabel: EditorsDeny}))
		probe, err := ensureBindings(t.Context(), cs)
		require.NoError(t, err)
		require.Empty(t, probe)
		require.Equal(t, authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, accessProbes(probe)[1].attr)
	})
}

func TestEditableNamespace(t *testing.T) {
	held := ServiceAccountNamespaces([]rbacv1.ClusterRoleBinding{
		{Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "flux-system", Name: "kustomize-controller"}}},
		{Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:argocd"}}},
		// Kubernetes binds every service account to issuer discovery.
		{Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}}},
		{Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "rezuscloud:view"}}},
	})
	require.Equal(t, map[string]bool{"flux-system": true, "argocd": true}, held)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   bool
		why    string
	}{
		{"default", nil, true, ""},
		{"apps", map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}, true, ""},
		{"kube-system", nil, false, "a Kubernetes system namespace"},
		{"kube-public", nil, false, "a Kubernetes system namespace"},
		{"kube-node-lease", nil, false, "a Kubernetes system namespace"},
		{"flux-system", nil, false, "a ClusterRoleBinding names its service accounts"},
		{"argocd", nil, false, "a ClusterRoleBinding names its service accounts"},
		{"csi", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}, false, "Pod Security enforces privileged"},
		{"billing", map[string]string{EditorsLabel: EditorsDeny}, false, "rezuscloud.io/editors=deny"},
		{"shop", map[string]string{EditorsLabel: "allow"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := EditableNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Labels: tc.labels}}, held)
			require.Equal(t, tc.want, ok)
			require.Equal(t, tc.why, why)
		})
	}
}

// sarCluster answers SubjectAccessReviews: a group is allowed once it has
// been asked about more than denials[group] times.
func sarCluster(denials map[string]int) (*fake.Clientset, map[string]int) {
	asked := map[string]int{}
	cs := fake.NewClientset()
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		g := sar.Spec.Groups[0]
		asked[g]++
		sar.Status.Allowed = asked[g] > denials[g]
		return true, sar, nil
	})
	return cs, asked
}

func TestAwaitAuthorized(t *testing.T) {
	t.Run("waits until every group is granted its role", func(t *testing.T) {
		cs, asked := sarCluster(map[string]int{talos.KubeGroupView: 3})
		require.NoError(t, awaitAuthorized(t.Context(), cs, "default", time.Millisecond))
		require.Equal(t, map[string]int{talos.KubeGroupAdmin: 1, talos.KubeGroupEdit: 1, talos.KubeGroupView: 4}, asked)
	})
	t.Run("gives up with the group at fault when the context ends", func(t *testing.T) {
		cs, _ := sarCluster(map[string]int{talos.KubeGroupEdit: 1 << 30})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		err := awaitAuthorized(ctx, cs, "default", time.Millisecond)
		require.ErrorContains(t, err, talos.KubeGroupEdit+" may not delete pods")
	})
}
