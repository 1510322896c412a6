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
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/etcdbackups", `{"metadata":{"name":"b"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	var backup map[string]any
	p.eventually(2*time.Minute, "the backup finished", func() bool {
		_, backup = p.do("GET", "/api/v1/tenants/"+tenant+"/etcdbackups/b", "")
		ph := phaseOf(backup)
		return ph == "Succeeded" || ph == "Failed"
	})
	require.Equal(t, "Succeeded", phaseOf(backup), "%v", backup)
	require.NoError(t, cms.Delete(ctx, "precious", metav1.DeleteOptions{}))

	var cluster string
	for _, n := range p.emulatorNodes() {
		if n["role"] == "controlplane" {
			cluster, _ = n["clusterID"].(string)
		}
	}
	require.NotEmpty(t, cluster)
	_, prov := p.do("GET", "/api/v1/providers/emulated", "")
	endpoint := prov["spec"].(map[string]any)["config"].(map[string]any)["endpoint"].(string)
	req, err := http.NewRequest(http.MethodDelete, endpoint+"/v1/clusters/"+cluster+"/etcd", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := cms.List(ctx, metav1.ListOptions{})
		assert.Error(c, err, "the API is gone with etcd")
	}, time.Minute, 200*time.Millisecond)

	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/restore", `{"backup":"b"}`)
	require.Equal(t, http.StatusCreated, code, body)
	name := body["metadata"].(map[string]any)["name"].(string)
	var rs map[string]any
	began := time.Now()
	p.eventually(5*time.Minute, "the restore finished", func() bool {
		_, rs = p.do("GET", "/api/v1/tenants/"+tenant+"/restores/"+name, "")
		ph := phaseOf(rs)
		return ph == "Succeeded" || ph == "Failed"
	})
	took := time.Since(began)
	require.Equal(t, "Succeeded", phaseOf(rs), "%v", rs)
	require.EqualValues(t, 3, rs["status"].(map[string]any)["members"], "every control plane serves the restored etcd")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := cms.Get(ctx, "precious", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, "v", got.Data["k"])
		}
	}, time.Minute, time.Second, "the ConfigMap deleted after the backup is back")
	requireNodesReady(t, k, 3, realKubeFrom)
	t.Logf("figures: restore of 3 control planes on the real etcd: %s", took.Round(100*time.Millisecond))
}
