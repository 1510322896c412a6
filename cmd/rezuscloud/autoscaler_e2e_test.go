//go:build e2e

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// autoscalerVersion is the cluster-autoscaler hack/autoscaler.sh builds.
const autoscalerVersion = "1.33.0"

// startClusterAutoscaler runs the real cluster-autoscaler against the
// tenant's real kube-apiserver (the break-glass kubeconfig) and
// RezusCloud's externalgrpc service (a certificate issued through the
// API, the files rezusctl autoscaler config writes), until the test ends.
func startClusterAutoscaler(t *testing.T, p *proc, tenant string) *syncBuffer {
	t.Helper()
	tools, err := tofutest.ToolsDir()
	require.NoError(t, err)
	bin := filepath.Join(tools, "autoscaler", autoscalerVersion, "cluster-autoscaler")
	_, err = os.Stat(bin)
	require.NoError(t, err, "the cluster-autoscaler is not built: run `go tool task tools`")
	dir := t.TempDir()
	code, creds := p.do(http.MethodPost, "/api/v1/tenants/"+tenant+"/autoscaler/certificates", `{"validity":"2h"}`)
	require.Equal(t, http.StatusCreated, code, creds)
	files := map[string]string{
		"tls.crt": creds["certificate"].(string), "tls.key": creds["key"].(string), "ca.crt": creds["ca"].(string),
		"kubeconfig": string(p.raw("/api/v1/tenants/" + tenant + "/kubeconfig/admin")),
		"cloud-config": fmt.Sprintf("address: %q\ncert: %q\nkey: %q\ncacert: %q\ngrpc_timeout: 10s\n", creds["endpoint"],
			filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")),
	}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin,
		"--cloud-provider=externalgrpc", "--cloud-config="+filepath.Join(dir, "cloud-config"),
		"--kubeconfig="+filepath.Join(dir, "kubeconfig"), "--namespace=kube-system", "--leader-elect=false",
		"--address=127.0.0.1:0", "--scan-interval=2s", "--expander=random",
		"--scale-down-unneeded-time=15s", "--scale-down-delay-after-add=10s", "--scale-down-delay-after-delete=0s",
		"--scale-down-delay-after-failure=10s", "--max-node-provision-time=4m", "--new-pod-scale-up-delay=0s",
		"--skip-nodes-with-system-pods=false", "--skip-nodes-with-local-storage=false", "--max-graceful-termination-sec=5",
		// A node whose pods had nowhere to go (the gpu pod) is looked at
		// again after this, not the default 5 minutes.
		"--unremovable-node-recheck-timeout=10s",
		"--v=2")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("cluster-autoscaler log (tail):\n%s", lastLines(out.String(), 80))
		}
	})
	return out
}

// syncBuffer is a buffer the autoscaler's output goroutines share. The
// bytes.Buffer is a field, not embedded: embedded, its ReadFrom was
// promoted, and exec's copy wrote through it around the lock (a data race
// the e2e suite reported while the test read the log).
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// hungry is a Deployment of replicas pods asking 3 CPUs each, on the
// autoscaled group's Nodes only: one fits a 4-CPU Node.
func hungry(t *testing.T, k kubernetes.Interface, replicas int32) {
	t.Helper()
	demand(t, k, "hungry", replicas, "3", map[string]string{"pool": "auto"}, nil)
}

// demand is a Deployment of replicas pods asking cpu each, placed by
// nodeSelector and tolerating tolerations.
func demand(t *testing.T, k kubernetes.Interface, name string, replicas int32, cpu string, nodeSelector map[string]string, tolerations []corev1.Toleration) {
	t.Helper()
	labels := map[string]string{"app": name}
	grace := int64(1)
	_, err := k.AppsV1().Deployments("default").Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, NodeSelector: nodeSelector, Tolerations: tolerations,
					Containers: []corev1.Container{{Name: name, Image: "registry.example/" + name + ":1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// podPhases counts the pods of app (default: hungry) by phase.
func podPhases(ctx context.Context, k kubernetes.Interface, app ...string) map[corev1.PodPhase]int {
	name := "hungry"
	if len(app) > 0 {
		name = app[0]
	}
	pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	out := map[corev1.PodPhase]int{}
	if err != nil {
		return out
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[p.Status.Phase]++
		}
	}
	return out
}

// The unmodified cluster-autoscaler sizes node groups through
// RezusCloud:
//   - 4 pods of 3 CPUs on 4-CPU Nodes grow a group of 1..3 to 3 (never 4),
//     3 pods Running and 1 Pending;
//   - a pod tolerating a taint grows a group of 0..1 from zero: the
//     template's labels and taint are the Node's;
//   - a scale-up whose apply fails (the emulator out of capacity) is
//     reported as out of resources: the autoscaler backs off and gives the
//     machine up, and nothing is left behind;
//   - without the load the groups go back to 1 and 0, the removed
//     machines' Nodes leave the API, and no machine is built again.
func TestClusterAutoscalerScalesANodeGroup(t *testing.T) {
	t.Parallel()
	p := startRealKubeServer(t, t.TempDir(), "--autoscaler-listen", "127.0.0.1:0")
	const tenant = "auto"
	code, body := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emulated","labels":{"pool":"auto"}}}`,
		`{"metadata":{"name":"gpu"},"spec":{"role":"worker","count":0,"provider":"emulated","labels":{"pool":"gpu"},` +
			`"taints":[{"key":"dedicated","value":"gpu","effect":"NoSchedule"}],"autoscaling":{"minCount":0,"maxCount":1}}}`,
		`{"metadata":{"name":"spot"},"spec":{"role":"worker","count":0,"provider":"emulated","labels":{"pool":"spot"},"autoscaling":{"minCount":0,"maxCount":2}}}`,
	} {
		code, body = p.do(http.MethodPost, "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	p.settled(tenant, 2)
	k := tenantKube(t, p, tenant)
	requireNodesReady(t, k, 2, realKubeFrom)
	ctx := t.Context()
	// workers-0 registered its Node before its group autoscaled: without
	// a provider ID the autoscaler would take the machine for one that
	// never registered, and delete it. RezusCloud gives it one.
	// (Its labels come after it registered, as Talos sets them.)
	workerNode := func() *corev1.Node {
		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "pool=auto"})
		if err != nil || len(nodes.Items) != 1 {
			return &corev1.Node{}
		}
		return &nodes.Items[0]
	}
	p.eventually(time.Minute, "workers-0's Node is labelled", func() bool { return workerNode().Name != "" })
	require.Empty(t, workerNode().Spec.ProviderID)
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant+"/nodegroups/workers", `{"spec":{"autoscaling":{"minCount":1,"maxCount":3}}}`))
	require.Equal(t, http.StatusUnprocessableEntity, p.mergePatch("/api/v1/tenants/"+tenant+"/nodegroups/workers", `{"spec":{"count":4}}`),
		"a count above maxCount is refused")
	p.eventually(3*time.Minute, "workers-0's Node has its provider ID", func() bool {
		return workerNode().Spec.ProviderID == "rezuscloud://"+tenant+"/workers-0"
	})
	p.settled(tenant, 2)

	ca := startClusterAutoscaler(t, p, tenant)
	began := time.Now()
	hungry(t, k, 4)
	demand(t, k, "gpu", 1, "1", map[string]string{"pool": "gpu"},
		[]corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}})
	p.eventually(6*time.Minute, "3 hungry pods Running on 3 workers, 1 Pending; the gpu pod Running", func() bool {
		ph := podPhases(ctx, k)
		return ph[corev1.PodRunning] == 3 && ph[corev1.PodPending] == 1 && podPhases(ctx, k, "gpu")[corev1.PodRunning] == 1
	})
	up := time.Since(began)
	require.Equal(t, 3, p.nodeGroupCount(tenant, "workers"))
	require.Equal(t, 1, p.nodeGroupCount(tenant, "gpu"))
	// The Node built from zero is what the template promised.
	gpuNodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "pool=gpu"})
	require.NoError(t, err)
	require.Len(t, gpuNodes.Items, 1)
	require.Equal(t, "rezuscloud://"+tenant+"/gpu-0", gpuNodes.Items[0].Spec.ProviderID)
	require.Contains(t, gpuNodes.Items[0].Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})

	// The infrastructure is full: the spot group's scale-up fails, the
	// autoscaler backs off and gives the machine up.
	const full = 5 // cp, 3 workers, gpu
	require.Len(t, p.emulatorNodes(), full)
	p.emulatorCapacity(full)
	demand(t, k, "spot", 1, "1", map[string]string{"pool": "spot"}, nil)
	p.eventually(4*time.Minute, "the autoscaler backs the spot group off", func() bool {
		return strings.Contains(ca.String(), "Disabling scale-up for node group spot")
	})
	p.eventually(2*time.Minute, "the failed machine given up: spot at 0 and the tenant applied", func() bool {
		return p.nodeGroupCount(tenant, "spot") == 0 && p.reconciled(tenant)
	})
	spotCounts, spotActors := p.nodeGroupHistory(tenant, "spot")
	require.Equal(t, []int{0, 1, 0}, slices.Compact(spotCounts), "spot's counts: %v by %v", spotCounts, spotActors)
	var capacityError bool
	for _, a := range p.applies(tenant) {
		capacityError = capacityError || a.Status.Phase == "Failed" && strings.Contains(a.Status.Error, "insufficient capacity")
	}
	require.True(t, capacityError, "an apply failed for lack of capacity")
	require.Len(t, p.machines(tenant), full, "no spot machine")
	require.Len(t, p.emulatorNodes(), full, "nothing left behind")
	require.Equal(t, 1, podPhases(ctx, k, "spot")[corev1.PodPending])
	require.NoError(t, k.AppsV1().Deployments("default").Delete(ctx, "spot", metav1.DeleteOptions{}))
	p.emulatorCapacity(0)

	// Without the load, back to 1 worker and no gpu.
	for _, d := range []string{"hungry", "gpu"} {
		require.NoError(t, k.AppsV1().Deployments("default").Delete(ctx, d, metav1.DeleteOptions{}))
	}
	began = time.Now()
	p.eventually(6*time.Minute, "the groups back at 1 and 0 machines and 2 Nodes left", func() bool {
		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(nodes.Items) == 2 && p.nodeGroupCount(tenant, "workers") == 1 &&
			p.nodeGroupCount(tenant, "gpu") == 0 && len(p.machines(tenant)) == 2
	})
	down := time.Since(began)
	p.settled(tenant, 2)

	// The history: the autoscaler's changes, the counts never above the
	// bounds, and no removed machine built again after it went.
	counts, actors := p.nodeGroupHistory(tenant, "workers")
	for _, c := range counts {
		require.LessOrEqual(t, c, 3, "counts over time: %v", counts)
	}
	require.Contains(t, actors, "system:autoscaler:"+tenant)
	gpuCounts, _ := p.nodeGroupHistory(tenant, "gpu")
	require.Equal(t, []int{0, 1, 0}, slices.Compact(gpuCounts))
	created, deleted := p.machineHistory(tenant)
	for name, gone := range deleted {
		for _, at := range created[name] {
			require.False(t, at > gone, "%s was built again after it was removed", name)
		}
	}
	require.Len(t, deleted, 3, "two workers and the gpu machine removed: %v", deleted)
	_, spotBuilt := created["spot-0"]
	require.False(t, spotBuilt, "the spot machine was never built")
	t.Logf("figures: pending pods to 3 Running on 1->3 workers and 0->1 gpu %s; load gone to 1 worker, 0 gpu %s (unneeded time 15s); counts %v",
		up.Round(time.Second), down.Round(time.Second), counts)
}

// emulatorCapacity limits the emulator to maxNodes nodes (0: no limit).
func (p *proc) emulatorCapacity(maxNodes int) {
	p.t.Helper()
	resp, err := http.DefaultClient.Do(p.emulatorRequest(http.MethodPut, "/v1/capacity", strings.NewReader(fmt.Sprintf(`{"maxNodes":%d}`, maxNodes))))
	require.NoError(p.t, err)
	defer resp.Body.Close()
	require.Equal(p.t, http.StatusOK, resp.StatusCode)
}

// nodeGroupCount is a node group's spec.count.
func (p *proc) nodeGroupCount(tenant, name string) int {
	var g struct {
		Spec struct {
			Count int `json:"count"`
		} `json:"spec"`
	}
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/nodegroups/"+name), &g))
	return g.Spec.Count
}

// nodeGroupHistory is the node group's count after each of its events,
// and who made them.
func (p *proc) nodeGroupHistory(tenant, name string) ([]int, []string) {
	var hist struct {
		Items []struct {
			Actor  string `json:"actor"`
			Object struct {
				Spec struct {
					Count int `json:"count"`
				} `json:"spec"`
			} `json:"object"`
		} `json:"items"`
	}
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/events?kind=NodeGroup&tenant="+tenant+"&name="+name+"&since=0&limit=10000"), &hist))
	var counts []int
	var actors []string
	for _, ev := range hist.Items {
		counts = append(counts, ev.Object.Spec.Count)
		actors = append(actors, ev.Actor)
	}
	return counts, actors
}

// machineHistory is, by machine, the sequences of its MachineCreated
// events and of its last MachineDeleted one.
func (p *proc) machineHistory(tenant string) (map[string][]uint64, map[string]uint64) {
	var hist struct {
		Items []struct {
			Seq    uint64 `json:"seq"`
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"object"`
		} `json:"items"`
	}
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/events?kind=Machine&tenant="+tenant+"&since=0&limit=10000"), &hist))
	created, deleted := map[string][]uint64{}, map[string]uint64{}
	for _, ev := range hist.Items {
		switch ev.Type {
		case "MachineCreated":
			created[ev.Object.Metadata.Name] = append(created[ev.Object.Metadata.Name], ev.Seq)
		case "MachineDeleted":
			deleted[ev.Object.Metadata.Name] = ev.Seq
		}
	}
	return created, deleted
}
