//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// The Kubernetes versions hack/kube.sh builds: the tenant default and the
// next minor.
const realKubeFrom, realKubeTo = "v1.35.4", "v1.36.1"

// startRealKubeServer starts a server whose emulated control planes run the
// real etcd and Kubernetes binaries built into the tools dir. A missing
// build fails the test: CI builds them (`go tool task tools`), and a skipped
// test would pass for nothing.
func startRealKubeServer(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	tools, err := tofutest.ToolsDir()
	require.NoError(t, err)
	for _, bin := range []string{"etcd/3.6.16/etcd", "kube/1.35.4/kube-apiserver", "kube/1.36.1/kube-apiserver"} {
		_, err := os.Stat(filepath.Join(tools, bin))
		require.NoError(t, err, "the real control plane is not built: run `go tool task tools`")
	}
	return startInfraServer(t, dataDir, append([]string{"--emulator-kube", "on", "--kube-tools", tools}, extra...)...)
}

// tenantKube is a client of the tenant's cluster from the break-glass
// kubeconfig RezusCloud hands global admins, with a short timeout so that a probe sees a failing
// API server as a failure, not a hang.
func tenantKube(t *testing.T, p *proc, tenant string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(p.raw("/api/v1/tenants/" + tenant + "/kubeconfig/admin"))
	require.NoError(t, err)
	cfg.Timeout = 5 * time.Second
	k, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return k
}

// requireNodesReady waits until the cluster has exactly n Nodes, each Ready
// with its kubelet at version.
func requireNodesReady(t *testing.T, k kubernetes.Interface, n int, version string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		nodes, err := k.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if !assert.NoError(c, err) || !assert.Len(c, nodes.Items, n) {
			return
		}
		for _, node := range nodes.Items {
			assert.Equal(c, version, node.Status.NodeInfo.KubeletVersion, node.Name)
			ready := false
			for _, cond := range node.Status.Conditions {
				ready = ready || cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
			}
			assert.True(c, ready, "%s Ready", node.Name)
		}
	}, 3*time.Minute, 500*time.Millisecond, "%d Nodes Ready at %s", n, version)
}

// probe runs fn every 200 ms until stopped and records the longest run of
// failures and the lowest value fn reported (for readiness counts).
type probe struct {
	mu       sync.Mutex
	longest  time.Duration
	lowest   int
	runs     int
	lastErr  error
	stop     context.CancelFunc
	finished chan struct{}
}

func startProbe(ctx context.Context, fn func(ctx context.Context) (int, error)) *probe {
	ctx, cancel := context.WithCancel(ctx)
	pr := &probe{lowest: int(^uint(0) >> 1), stop: cancel, finished: make(chan struct{})}
	go func() {
		defer close(pr.finished)
		var failingSince time.Time
		for ctx.Err() == nil {
			v, err := fn(ctx)
			pr.mu.Lock()
			switch {
			case ctx.Err() != nil:
			case err != nil:
				pr.lastErr = err
				if failingSince.IsZero() {
					failingSince = time.Now()
				}
			default:
				pr.runs++
				pr.lowest = min(pr.lowest, v)
				if !failingSince.IsZero() {
					pr.longest = max(pr.longest, time.Since(failingSince))
					failingSince = time.Time{}
				}
			}
			pr.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		if !failingSince.IsZero() {
			pr.longest = max(pr.longest, time.Since(failingSince))
		}
	}()
	return pr
}

// end stops the probe and returns its longest failure and lowest value.
func (pr *probe) end() (longest time.Duration, lowest, runs int, lastErr error) {
	pr.stop()
	<-pr.finished
	return pr.longest, pr.lowest, pr.runs, pr.lastErr
}

// TestRealKubernetesThroughRezusCloud drives a 3+2 cluster whose emulated
// nodes run the real etcd and Kubernetes binaries through RezusCloud's own
// paths, with kubectl's library as the judge:
//   - a Kubernetes upgrade from the lower to the higher built version
//     replaces the control plane's components node by node (the API server
//     answers the target, every kubelet is at it) while a 3-replica
//     Deployment keeps at least 2 pods Ready;
//   - scaling the control planes 3 -> 1 keeps a ConfigMap write+read probe
//     failing for no longer than a leader election, leaves a one-member real
//     etcd, and keeps the data;
//   - rotating the Kubernetes CA fails no request of a ConfigMap probe
//     and refuses the credentials from before (rotation_e2e_test.go);
//   - an etcd backup taken through RezusCloud is a backup: a ConfigMap
//     deleted after it, the control plane's etcd lost, a Restore through
//     RezusCloud, and the ConfigMap is back with every machine's Node Ready.
func TestRealKubernetesThroughRezusCloud(t *testing.T) {
	t.Parallel()
	oneHeavyTest(t)
	p := startRealKubeServer(t, t.TempDir())
	const tenant = "rk"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"kubernetesVersion":"`+realKubeFrom+`"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":3,"provider":"emulated"}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":2,"provider":"emulated",
			"labels":{"tier":"web"},"taints":[{"key":"dedicated","value":"web","effect":"PreferNoSchedule"}]}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	// Issue 43: a version the tools carry no control plane of is refused
	// at write time, naming the field and the versions there are, instead
	// of an Upgrade that waits for an API server that never starts.
	code, refused := p.patchStatus("/api/v1/tenants/"+tenant, `{"spec":{"kubernetesVersion":"v1.35.5"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, refused)
	require.Equal(t, []any{map[string]any{"field": "spec.kubernetesVersion", "reason": domain.CauseNotSupported,
		"message": `node groups cp, workers: provider "emulated" runs Kubernetes ` + realKubeFrom + ", " + realKubeTo + " only, not v1.35.5"}},
		refused["details"].(map[string]any)["causes"], refused)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", p.log())
		}
	})
	p.settled(tenant, 5)
	k := tenantKube(t, p, tenant)
	requireNodesReady(t, k, 5, realKubeFrom)
	ctx := t.Context()

	// Health asks Kubernetes too: the API server ready at the tenant's
	// version, every machine's Node Ready with its kubelet's version.
	var h domain.TenantHealth
	p.eventually(time.Minute, "health Ready with Kubernetes", func() bool {
		h = domain.TenantHealth{}
		require.NoError(t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/health?refresh=true"), &h))
		return h.State == domain.HealthReady
	})
	require.NotNil(t, h.Kubernetes)
	require.True(t, h.Kubernetes.Ready, h.Kubernetes.Error)
	require.Equal(t, realKubeFrom, h.Kubernetes.Version)
	require.Len(t, h.Machines, 5)
	for _, m := range h.Machines {
		require.Equal(t, domain.NodeReady, m.Node, m.Name)
		require.Equal(t, realKubeFrom, m.KubeletVersion, m.Name)
	}

	// The workers group's labels and taints are on its Nodes (the control
	// planes carry the control-plane role and no group label); a day-2
	// change of them reaches the Nodes through the config path.
	nodeMeta := func(c *assert.CollectT, wantTier, wantTaint, goneTaint string) {
		for _, m := range p.machines(tenant) {
			n, err := k.CoreV1().Nodes().Get(ctx, m.Spec.Hostname, metav1.GetOptions{})
			if !assert.NoError(c, err) {
				return
			}
			var taints []string
			for _, tn := range n.Spec.Taints {
				taints = append(taints, tn.Key+"="+tn.Value+":"+string(tn.Effect))
			}
			if m.Spec.Role == "worker" {
				assert.Equal(c, wantTier, n.Labels["tier"], n.Name)
				assert.Contains(c, taints, wantTaint, n.Name)
				assert.NotContains(c, taints, goneTaint, n.Name)
			} else {
				assert.NotContains(c, n.Labels, "tier", n.Name)
				assert.Contains(c, n.Labels, "node-role.kubernetes.io/control-plane", n.Name)
			}
		}
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { nodeMeta(c, "web", "dedicated=web:PreferNoSchedule", "") },
		time.Minute, 500*time.Millisecond, "the group's labels and taints are on its Nodes")
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant+"/nodegroups/workers",
		`{"spec":{"labels":{"tier":"batch"},"taints":[{"key":"dedicated","value":"batch","effect":"PreferNoSchedule"}]}}`))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		nodeMeta(c, "batch", "dedicated=batch:PreferNoSchedule", "dedicated=web:PreferNoSchedule")
	},
		2*time.Minute, 500*time.Millisecond, "a day-2 change of them reaches the Nodes")

	// The workload: 3 replicas on the two workers.
	labels := map[string]string{"app": "web"}
	replicas := int32(3)
	_, err := k.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	readyPods := func(ctx context.Context) (int, error) {
		pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return 0, err
		}
		n := 0
		for _, pod := range pods.Items {
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && pod.DeletionTimestamp == nil {
					n++
				}
			}
		}
		return n, nil
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := readyPods(ctx)
		assert.NoError(c, err)
		assert.Equal(c, 3, n)
	}, 2*time.Minute, 500*time.Millisecond, "the Deployment's 3 pods Ready")

	t.Run("KubernetesUpgrade", func(t *testing.T) {
		ready := startProbe(ctx, readyPods)
		started := time.Now()
		require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant, `{"spec":{"kubernetesVersion":"`+realKubeTo+`"}}`))
		p.eventually(8*time.Minute, "the Kubernetes upgrade finished", func() bool {
			us := p.upgrades(tenant)
			return len(us) == 1 && (us[0].Status.Phase == "Succeeded" || us[0].Status.Phase == "Failed")
		})
		took := time.Since(started)
		run := p.upgrades(tenant)[0]
		require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)
		requireNodesReady(t, k, 5, realKubeTo)
		v, err := k.Discovery().ServerVersion()
		require.NoError(t, err)
		require.Equal(t, realKubeTo, v.GitVersion, "the API server answers the target version")
		_, lowest, runs, _ := ready.end()
		require.Positive(t, runs)
		require.GreaterOrEqual(t, lowest, 2, "Ready pods of the 3-replica Deployment during the upgrade")
		t.Logf("figures: Kubernetes %s -> %s on 3+2 in %s; lowest Ready replicas %d of 3 over %d probes",
			realKubeFrom, realKubeTo, took.Round(time.Second), lowest, runs)
	})

	// Issue 46: the Kubernetes CA rotates with no failed request; the
	// subtests after it use a client on the new CA.
	t.Run("KubernetesCARotation", func(t *testing.T) {
		k = rotateKubernetesCA(t, p, tenant, 5, realKubeTo, 0)
	})

	t.Run("ControlPlanesThreeToOne", func(t *testing.T) {
		cms := k.CoreV1().ConfigMaps("default")
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-scale-down"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		i := 0
		writes := startProbe(ctx, func(ctx context.Context) (int, error) {
			i++
			name := fmt.Sprintf("probe-%d", i)
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				return 0, err
			}
			_, err := cms.Get(ctx, name, metav1.GetOptions{})
			return 0, err
		})
		require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant+"/nodegroups/cp", `{"spec":{"count":1}}`))
		p.settled(tenant, 3)
		longest, _, runs, lastErr := writes.end()
		require.Positive(t, runs)
		require.Less(t, longest, 10*time.Second, "the API answered through the scale-down but for leader elections (last error: %v)", lastErr)
		_, err = cms.Get(ctx, "before-scale-down", metav1.GetOptions{})
		require.NoError(t, err, "data written before the scale-down is there")

		// The real member list, through the Talos API as talosctl asks it.
		var cp0 string
		for _, m := range p.machines(tenant) {
			if m.Spec.Role == "controlplane" {
				cp0 = m.Spec.Address
			}
		}
		require.NotEmpty(t, cp0)
		tc, err := clientconfig.FromBytes(p.raw("/api/v1/tenants/" + tenant + "/talosconfig"))
		require.NoError(t, err)
		tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		c, err := client.New(tctx, client.WithConfig(tc), client.WithEndpoints(cp0))
		require.NoError(t, err)
		defer c.Close()
		ml, err := c.EtcdMemberList(tctx, &machineapi.EtcdMemberListRequest{})
		require.NoError(t, err)
		require.Len(t, ml.Messages, 1)
		var names []string
		for _, m := range ml.Messages[0].Members {
			names = append(names, m.Hostname)
		}
		require.Len(t, names, 1, "one etcd member left: %v", names)
		// The Nodes of the control planes that went are deleted: no ghosts.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if !assert.NoError(c, err) {
				return
			}
			var got []string
			for _, n := range nodes.Items {
				got = append(got, n.Name)
			}
			var want []string
			for _, m := range p.machines(tenant) {
				want = append(want, m.Spec.Hostname)
			}
			assert.ElementsMatch(c, want, got)
		}, time.Minute, 500*time.Millisecond, "kubectl get nodes lists the machines that stay")
		t.Logf("figures: control planes 3 -> 1; longest API failure %s over %d probes", longest.Round(time.Millisecond), runs)
	})
	t.Run("BackupIsABackup", func(t *testing.T) {
		cms := k.CoreV1().ConfigMaps("default")
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "precious"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		// A heartbeat stamped after the backup (heartbeats are stamped in whole
		// seconds, truncated) was not in the snapshot: it came after the restore.
		var restoredAt time.Time
		rs := etcdDisaster(t, p, tenant, k, func() {
			require.NoError(t, cms.Delete(ctx, "precious", metav1.DeleteOptions{}))
			restoredAt = time.Now()
		})
		require.EqualValues(t, 1, rs["status"].(map[string]any)["members"], "the control plane serves the restored etcd")
		got, err := cms.Get(ctx, "precious", metav1.GetOptions{})
		require.NoError(t, err, "the ConfigMap deleted after the backup is back")
		require.Equal(t, "v", got.Data["k"])
		// Every machine's Node is Ready again, by a heartbeat since the
		// restore (not the Ready the snapshot held).
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, m := range p.machines(tenant) {
				n, err := k.CoreV1().Nodes().Get(ctx, m.Spec.Hostname, metav1.GetOptions{})
				if !assert.NoError(c, err, m.Spec.Hostname) {
					continue
				}
				ready := false
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady {
						ready = cond.Status == corev1.ConditionTrue && cond.LastHeartbeatTime.After(restoredAt)
					}
				}
				assert.True(c, ready, "%s Ready by a heartbeat after the restore", n.Name)
			}
		}, 3*time.Minute, time.Second)
	})
}

// phaseOf is an object's status.phase.
func phaseOf(obj map[string]any) string {
	st, _ := obj["status"].(map[string]any)
	ph, _ := st["phase"].(string)
	return ph
}
