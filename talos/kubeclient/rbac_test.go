package kubeclient

import (
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rezuscloud/rezuscloud/talos"
)

func TestEnsureBindings(t *testing.T) {
	// A cluster where someone pointed the view group at cluster-admin and
	// added a subject to the edit binding.
	cs := fake.NewClientset(
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: talos.KubeGroupView},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: talos.KubeGroupView}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: talos.KubeGroupEdit},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: talos.KubeGroupEdit},
				{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}},
	)
	for range 2 { // twice: the second finds everything in place
		require.NoError(t, ensureBindings(t.Context(), cs))
		for group, role := range map[string]string{talos.KubeGroupAdmin: "cluster-admin", talos.KubeGroupEdit: "edit", talos.KubeGroupView: "view"} {
			got, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), group, metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, role, got.RoleRef.Name, group)
			require.Equal(t, []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}}, got.Subjects, group)
		}
	}
}
