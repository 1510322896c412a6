//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// deployment creates a Deployment of replicas pods labelled app=name in
// default, each with a 1 s grace period, and answers a probe of its
// available replicas once all are available.
func deployment(t *testing.T, k kubernetes.Interface, name string, replicas int32, affinity *corev1.Affinity) func(ctx context.Context) (int, error) {
	t.Helper()
	ctx := t.Context()
	labels := map[string]string{"app": name}
	grace := int64(1)
	_, err := k.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Affinity: affinity,
					Containers: []corev1.Container{{Name: name, Image: "registry.example/" + name + ":1"}}},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	available := func(ctx context.Context) (int, error) {
		d, err := k.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		return int(d.Status.AvailableReplicas), nil
	}
	requireAvailable(t, available, int(replicas))
	return available
}

// requireAvailable waits until available answers want.
func requireAvailable(t *testing.T, available func(ctx context.Context) (int, error), want int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := available(t.Context())
		assert.NoError(c, err)
		assert.Equal(c, want, n)
	}, 2*time.Minute, 500*time.Millisecond, "%d replicas available", want)
}

// budget creates a PodDisruptionBudget over app=app with minAvailable or,
// when min is nil, maxUnavailable max.
func budget(t *testing.T, k kubernetes.Interface, name, app string, min, max *int32) {
	t.Helper()
	spec := policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}
	if min != nil {
		v := intstr.FromInt32(*min)
		spec.MinAvailable = &v
	} else {
		v := intstr.FromInt32(*max)
		spec.MaxUnavailable = &v
	}
	_, err := k.PolicyV1().PodDisruptionBudgets("default").Create(t.Context(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	require.NoError(t, err)
}

func ptr[T any](v T) *T { return &v }

// upgradesEntered counts, per machine, how many times an upgrade run's
// history (its status events) shows it entering Upgrading: a reboot each.
func upgradesEntered(t *testing.T, p *proc, tenant, run string) map[string]int {
	t.Helper()
	var hist struct {
		Items []struct {
			Object upgradeRun `json:"object"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p.raw("/api/v1/events?kind=Upgrade&tenant="+tenant+"&name="+run+"&since=0&limit=10000"), &hist))
	entered := map[string]int{}
	last := map[string]string{}
	for _, ev := range hist.Items {
		for _, m := range ev.Object.Status.Machines {
			if m.Phase == "Upgrading" && last[m.Name] != "Upgrading" {
				entered[m.Name]++
			}
			last[m.Name] = m.Phase
		}
	}
	return entered
}

// etcdDisaster takes an etcd backup of the tenant through RezusCloud, runs
// between (a change after the backup), wipes every control plane's etcd
// through the emulator and waits until the API server is gone, then
// restores the backup through RezusCloud and answers the finished Restore.
func etcdDisaster(t *testing.T, p *proc, tenant string, k kubernetes.Interface, between func()) map[string]any {
	t.Helper()
	ctx := t.Context()
	code, body := p.do("POST", "/api/v1/tenants/"+tenant+"/etcdbackups", `{"metadata":{"name":"before-disaster"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	var backup map[string]any
	p.eventually(2*time.Minute, "the backup finished", func() bool {
		_, backup = p.do("GET", "/api/v1/tenants/"+tenant+"/etcdbackups/before-disaster", "")
		ph := phaseOf(backup)
		return ph == "Succeeded" || ph == "Failed"
	})
	require.Equal(t, "Succeeded", phaseOf(backup), "%v", backup)
	between()

	var cluster string
	for _, n := range p.emulatorNodes() {
		if n["role"] == "controlplane" {
			cluster, _ = n["clusterID"].(string)
		}
	}
	require.NotEmpty(t, cluster)
	resp, err := http.DefaultClient.Do(p.emulatorRequest(http.MethodDelete, "/v1/clusters/"+cluster+"/etcd", nil))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := k.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		assert.Error(c, err, "the API is gone with etcd")
	}, time.Minute, 200*time.Millisecond)

	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/restore", `{"backup":"before-disaster"}`)
	require.Equal(t, http.StatusCreated, code, body)
	name := body["metadata"].(map[string]any)["name"].(string)
	var rs map[string]any
	p.eventually(5*time.Minute, "the restore finished", func() bool {
		_, rs = p.do("GET", "/api/v1/tenants/"+tenant+"/restores/"+name, "")
		ph := phaseOf(rs)
		return ph == "Succeeded" || ph == "Failed"
	})
	require.Equal(t, "Succeeded", phaseOf(rs), "%v", rs)
	return rs
}
