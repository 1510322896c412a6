package kubeclient

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

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
		require.NoError(t, awaitAuthorized(t.Context(), cs, time.Millisecond))
		require.Equal(t, map[string]int{talos.KubeGroupAdmin: 1, talos.KubeGroupEdit: 1, talos.KubeGroupView: 4}, asked)
	})
	t.Run("gives up with the group at fault when the context ends", func(t *testing.T) {
		cs, _ := sarCluster(map[string]int{talos.KubeGroupEdit: 1 << 30})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		err := awaitAuthorized(ctx, cs, time.Millisecond)
		require.ErrorContains(t, err, talos.KubeGroupEdit+" may not delete pods")
	})
}
