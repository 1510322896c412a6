//go:build e2e

package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRestoreThreeControlPlanes restores a 3-control-plane cluster on the
// real etcd from a backup after every member lost its data: one control
// plane recovers from the snapshot, the other two join it again (learner,
// then promoted), the ConfigMap deleted after the backup is back and etcd
// has three voting members.
func TestRestoreThreeControlPlanes(t *testing.T) {
	t.Parallel()
	p := startRealKubeServer(t, t.TempDir())
	const tenant = "r3"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"talosVersion":"v1.13.0"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", `{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":3,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", p.log())
		}
	})
	p.settled(tenant, 3)
	k := tenantKube(t, p, tenant)
	requireNodesReady(t, k, 3, realKubeFrom)
	ctx := t.Context()
	cms := k.CoreV1().ConfigMaps("default")
	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "precious"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	began := time.Now()
	rs := etcdDisaster(t, p, tenant, k, func() { require.NoError(t, cms.Delete(ctx, "precious", metav1.DeleteOptions{})) })
	took := time.Since(began)
	require.EqualValues(t, 3, rs["status"].(map[string]any)["members"], "every control plane serves the restored etcd")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := cms.Get(ctx, "precious", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, "v", got.Data["k"])
		}
	}, time.Minute, time.Second, "the ConfigMap deleted after the backup is back")
	requireNodesReady(t, k, 3, realKubeFrom)
	t.Logf("figures: backup, wipe and restore of 3 control planes on the real etcd: %s", took.Round(100*time.Millisecond))
}
