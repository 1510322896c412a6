package kubetest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

func TestSharedAuthorizesAsAClusterDoes(t *testing.T) {
	env := kubetest.Shared(t)
	assert.Same(t, env, kubetest.Shared(t), "one Env per test binary")
	assert.Equal(t, "v"+kubetest.KubeVersion, env.Version)
	ctx := t.Context()

	admin, err := kubernetes.NewForConfig(env.AdminConfig)
	require.NoError(t, err)
	_, err = admin.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the admin may do anything")

	node, err := kubernetes.NewForConfig(env.ClientFor("system:node:w1", "system:nodes"))
	require.NoError(t, err)
	_, err = node.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "the Node authorizer: a kubelet lists no secrets (%v)", err)
	_, err = node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "NodeRestriction: a kubelet registers only itself (%v)", err)
	_, err = node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "w1", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""},
	}}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "NodeRestriction: a kubelet sets no role label (%v)", err)
	_, err = node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	anonymous, err := kubernetes.NewForConfig(env.ClientFor("alice"))
	require.NoError(t, err)
	_, err = anonymous.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "RBAC: a user without bindings may not list nodes (%v)", err)
}
