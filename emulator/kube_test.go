package emulator

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/emulator/kubecp"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// kubeTestVersion is the Kubernetes version the real-control-plane tests run
// (built by `go tool task tools`).
const kubeTestVersion = "1.35.4"

// startKubeEmulator runs an emulator of cfg whose nodes run the real control plane.
func startKubeEmulator(t *testing.T, cfg Config) *Emulator {
	t.Helper()
	tools, err := tofutest.ToolsDir()
	require.NoError(t, err)
	if len(kubecp.Available(tools)) == 0 {
		t.Fatalf("no Kubernetes binaries under %s: run `go tool task tools`", tools)
	}
	cfg.Addressing = AddressingLoopback
	// Machines are down long enough for their Nodes to show it.
	cfg.RebootDelay = 2 * time.Second
	cfg.Kube = &KubeConfig{ToolsDir: tools}
	cfg.Logf = t.Logf
	em, _ := startEmulator(t, cfg)
	return em
}

// bootstrappedKubeCluster makes control plane cp-1 on a reserved address,
// the cluster's endpoint, and worker w-1, and bootstraps etcd on cp-1.
func bootstrappedKubeCluster(t *testing.T, em *Emulator, name string) (cl testCluster, cp, w NodeStatus) {
	t.Helper()
	ctx := context.Background()
	addr, err := em.ReserveAddress(ctx, AddressSpec{Name: "endpoint"})
	require.NoError(t, err)
	cl = newTestClusterAt(t, name, "https://"+net.JoinHostPort(addr.Address, "6443"), kubeTestVersion)
	_, err = em.Create(ctx, NodeSpec{Name: "cp-1", UserData: cl.controlPlane, Address: addr.Address})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "cp-1", PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, "cp-1 running")
	w = configuredNode(t, em, "w-1", cl.worker)
	cp, err = em.Get("cp-1")
	require.NoError(t, err)
	require.NoError(t, connect(t, cl.admin, cp.Address).Bootstrap(callCtx(t), &machine.BootstrapRequest{}))
	return cl, cp, w
}

func kubeClient(t *testing.T, em *Emulator, node string) kubernetes.Interface {
	t.Helper()
	var kc []byte
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		kc, err = em.AdminKubeconfig(node)
		assert.NoError(c, err)
	}, 2*time.Minute, 100*time.Millisecond)
	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		assert.NoError(c, err)
	}, 2*time.Minute, 100*time.Millisecond, "the API server is ready")
	return cs
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestRealControlPlane: a control plane and a worker of the emulator are a
// Kubernetes cluster: the real API server answers at the cluster's
// endpoint with both Nodes Ready at the config's version, the control
// plane's labels and the config's node labels on them; the Talos etcd calls
// answer from the real etcd; a rebooting worker's Node goes NotReady and
// comes back Ready.
func TestRealControlPlane(t *testing.T) {
	t.Parallel()
	em := startKubeEmulator(t, fastConfig(t.TempDir()))
	ctx := context.Background()
	cl, st, w := bootstrappedKubeCluster(t, em, "real")
	cp := connect(t, cl.admin, st.Address)

	k := kubeClient(t, em, "cp-1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if !assert.NoError(c, err) || !assert.Len(c, nodes.Items, 2) {
			return
		}
		for _, n := range nodes.Items {
			assert.True(c, nodeReady(&n), "%s Ready", n.Name)
			assert.Equal(c, "v"+kubeTestVersion, n.Status.NodeInfo.KubeletVersion, n.Name)
		}
	}, 3*time.Minute, 500*time.Millisecond, "both Nodes register and are Ready")
	v, err := k.Discovery().ServerVersion()
	require.NoError(t, err)
	require.Equal(t, "v"+kubeTestVersion, v.GitVersion)
	// Talos labels and taints a control plane's Node once it registered
	// (its kubelet does not), as the emulator does: Ready may come first.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := k.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
		if !assert.NoError(c, err) {
			return
		}
		assert.Contains(c, n.Labels, "node-role.kubernetes.io/control-plane")
		assert.Contains(c, fmt.Sprint(n.Spec.Taints), "node-role.kubernetes.io/control-plane")
	}, time.Minute, 250*time.Millisecond, "cp-1 labelled and tainted as a control plane")

	// The Talos etcd calls answer from the real etcd: one member, learner
	// no more, with etcd's own id (not the light mode's hash of the name).
	members, err := cp.EtcdMemberList(callCtx(t), &machine.EtcdMemberListRequest{})
	require.NoError(t, err)
	require.Len(t, members.Messages[0].Members, 1)
	require.Equal(t, "cp-1", members.Messages[0].Members[0].Hostname)
	require.NotEqual(t, memberID("cp-1"), members.Messages[0].Members[0].Id)
	status, err := cp.EtcdStatus(callCtx(t))
	require.NoError(t, err)
	require.Equal(t, members.Messages[0].Members[0].Id, status.Messages[0].MemberStatus.Leader)
	require.Positive(t, status.Messages[0].MemberStatus.DbSize)

	// A day-2 change of the worker's node labels and taints (applied in
	// place, as Talos applies machine.nodeLabels) reaches its Node; the
	// labeller owns only what it set.
	wc := connect(t, cl.admin, w.Address)
	_, err = k.CoreV1().Nodes().Patch(ctx, "w-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"someone-else":"x"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	labelled := patched(t, cl.worker, `machine:
  nodeLabels:
    tier: web
  nodeTaints:
    dedicated: web:NoSchedule
`)
	_, err = wc.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: labelled, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := k.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, "web", n.Labels["tier"])
			assert.Contains(c, fmt.Sprint(n.Spec.Taints), "dedicated")
		}
	}, time.Minute, 100*time.Millisecond, "the new label and taint reach the Node")
	_, err = wc.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: cl.worker, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := k.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.NotContains(c, n.Labels, "tier")
			assert.NotContains(c, fmt.Sprint(n.Spec.Taints), "dedicated")
			assert.Equal(c, "x", n.Labels["someone-else"], "a label it does not own stays")
		}
	}, time.Minute, 100*time.Millisecond, "labels and taints removed from the config leave the Node")

	// A worker that reboots reports NotReady, then Ready again.
	require.NoError(t, wc.Reboot(callCtx(t)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := k.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.False(c, nodeReady(n), "NotReady while it reboots")
		}
	}, time.Minute, 20*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := k.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.True(c, nodeReady(n), "Ready after the reboot")
		}
	}, time.Minute, 200*time.Millisecond)

	// Backup is a backup: a ConfigMap written, a snapshot taken, the
	// ConfigMap deleted, etcd lost; the snapshot uploaded and bootstrapped
	// from brings the ConfigMap back and the Nodes Ready again.
	cms := k.CoreV1().ConfigMaps("default")
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	snap, err := takeSnapshot(t, cp)
	require.NoError(t, err)
	require.NoError(t, cms.Delete(ctx, "kept", metav1.DeleteOptions{}))
	require.NoError(t, em.WipeEtcd(clusterOf(t, em, "cp-1")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := cms.List(ctx, metav1.ListOptions{})
		assert.Error(c, err, "the API is gone with etcd")
	}, time.Minute, 100*time.Millisecond)
	damaged := append([]byte(nil), snap...)
	damaged[len(damaged)/2] ^= 0xff
	requireCode(t, codes.InvalidArgument, upload(t, cp, damaged))
	require.NoError(t, upload(t, cp, snap))
	restoredAt := time.Now().Add(-time.Second) // heartbeats are stamped in whole seconds
	require.NoError(t, recoverEtcd(t, cp))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := cms.Get(ctx, "kept", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, "b", got.Data["a"])
		}
	}, 2*time.Minute, 200*time.Millisecond, "the ConfigMap is back")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if assert.NoError(c, err) && assert.Len(c, nodes.Items, 2) {
			for _, n := range nodes.Items {
				assert.True(c, nodeReady(&n), "%s Ready", n.Name)
				// Not the Ready the snapshot held: a heartbeat since.
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady {
						assert.True(c, cond.LastHeartbeatTime.After(restoredAt), "%s heartbeats again", n.Name)
					}
				}
			}
		}
	}, 3*time.Minute, 200*time.Millisecond, "the Nodes are Ready again")
}

// TestTalosctlUpgradeDrains: the real talosctl upgrades the control plane of
// a real cluster with its default drain: it cordons the Node and evicts the
// Deployment's pod through the real API server (the pod is replaced), the
// machine boots the new version, and talosctl uncordons the Node. (A
// control plane: talosctl fetches the kubeconfig from its endpoint, and the
// emulator's nodes do not proxy to one another as apid does, so a worker as
// the endpoint has no kubeconfig to give.)
func TestTalosctlUpgradeDrains(t *testing.T) {
	t.Parallel()
	bin := talosctlPath(t)
	cfg := fastConfig(t.TempDir())
	cfg.ShutdownDelay = InteractiveShutdownDelay // talosctl --wait follows the action's events
	em := startKubeEmulator(t, cfg)
	ctx := context.Background()
	cl, st, _ := bootstrappedKubeCluster(t, em, "drain")
	k := kubeClient(t, em, "cp-1")

	one := int32(1)
	labels := map[string]string{"app": "web"}
	_, err := k.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}},
					NodeSelector: map[string]string{"kubernetes.io/hostname": "cp-1"},
					Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists,
						Effect: corev1.TaintEffectNoSchedule}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	runningPod := func(c *assert.CollectT) string {
		pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if !assert.NoError(c, err) || !assert.Len(c, pods.Items, 1) {
			return ""
		}
		p := pods.Items[0]
		assert.Equal(c, "cp-1", p.Spec.NodeName)
		assert.Equal(c, corev1.PodRunning, p.Status.Phase)
		return p.Name
	}
	var before string
	require.EventuallyWithT(t, func(c *assert.CollectT) { before = runningPod(c) }, 3*time.Minute, 200*time.Millisecond,
		"the Deployment's pod runs on the control plane")

	var cordoned atomicBool
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for wctx.Err() == nil {
			if n, err := k.CoreV1().Nodes().Get(wctx, "cp-1", metav1.GetOptions{}); err == nil && n.Spec.Unschedulable {
				cordoned.set()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	cpctl := newTalosctl(t, bin, cl, st)
	out := cpctl.run(t, "upgrade", "--image", "ghcr.io/siderolabs/installer:v1.13.1", "--wait")
	stopWatch()
	require.True(t, cordoned.get(), "talosctl cordoned the Node during the upgrade:\n%s", out)
	got, err := em.Get("cp-1")
	require.NoError(t, err)
	require.Equal(t, "v1.13.1", got.Version)
	n, err := k.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable, "talosctl uncordoned the Node")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		after := runningPod(c)
		assert.NotEqual(c, before, after, "the pod was evicted and replaced")
	}, 3*time.Minute, 200*time.Millisecond)
}

// atomicBool is set once by a watcher goroutine and read by the test.
type atomicBool struct{ v atomic.Bool }

func (b *atomicBool) set()      { b.v.Store(true) }
func (b *atomicBool) get() bool { return b.v.Load() }

// TestRealEtcdScaleDown: three control planes join the real etcd (as
// learners, then promoted); two leave one after the other through the
// Talos API and are deleted, while a probe writes a ConfigMap every 200 ms
// through the remaining control plane. The member list ends with one
// member, what was written before is there, and the probe never failed for
// longer than a leader election takes (bounded generously: a loaded CI
// machine).
func TestRealEtcdScaleDown(t *testing.T) {
	t.Parallel()
	em := startKubeEmulator(t, fastConfig(t.TempDir()))
	ctx := context.Background()
	cl, st, _ := bootstrappedKubeCluster(t, em, "scale")
	cp1 := connect(t, cl.admin, st.Address)
	clients := map[string]*client.Client{}
	for _, name := range []string{"cp-2", "cp-3"} {
		clients[name] = connect(t, cl.admin, configuredNode(t, em, name, cl.controlPlane).Address)
	}
	voters := func() ([]string, error) {
		resp, err := cp1.EtcdMemberList(callCtx(t), &machine.EtcdMemberListRequest{})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, m := range resp.Messages[0].Members {
			if !m.IsLearner {
				names = append(names, m.Hostname)
			}
		}
		slices.Sort(names)
		return names, nil
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		names, err := voters()
		if assert.NoError(c, err) {
			assert.Equal(c, []string{"cp-1", "cp-2", "cp-3"}, names)
		}
	}, 3*time.Minute, 500*time.Millisecond, "three voting members")
	for name, c := range clients {
		require.EventuallyWithT(t, func(col *assert.CollectT) {
			_, err := c.EtcdStatus(callCtx(t))
			assert.NoError(col, err)
		}, 3*time.Minute, 500*time.Millisecond, "%s's control plane runs", name)
	}

	k := kubeClient(t, em, "cp-1")
	cms := k.CoreV1().ConfigMaps("default")
	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The probe: a write and a read every 200 ms; the longest run of
	// failures, and how many rounds answered.
	pctx, stopProbe := context.WithCancel(ctx)
	var longest time.Duration
	var answered atomic.Int64
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		var failingSince time.Time
		for i := 0; pctx.Err() == nil; i++ {
			name := fmt.Sprintf("probe-%d", i)
			_, err := cms.Create(pctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err == nil {
				_, err = cms.Get(pctx, name, metav1.GetOptions{})
			}
			switch {
			case pctx.Err() != nil:
			case err != nil && failingSince.IsZero():
				failingSince = time.Now()
			case err == nil && !failingSince.IsZero():
				longest = max(longest, time.Since(failingSince))
				failingSince = time.Time{}
			}
			if err == nil {
				answered.Add(1)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !failingSince.IsZero() {
			longest = max(longest, time.Since(failingSince))
		}
	}()

	for _, name := range []string{"cp-3", "cp-2"} {
		// A membership change waits for etcd to apply it: more than a
		// plain call's 2 s on a loaded machine.
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := clients[name].EtcdLeaveCluster(lctx, &machine.EtcdLeaveClusterRequest{})
		cancel()
		require.NoError(t, err, "%s leaves etcd", name)
		require.NoError(t, em.Delete(name))
	}
	names, err := voters()
	require.NoError(t, err)
	require.Equal(t, []string{"cp-1"}, names, "one member left")
	// The API answers on the one member: ten more rounds of the probe.
	after := answered.Load()
	require.Eventually(t, func() bool { return answered.Load() >= after+10 }, time.Minute, 100*time.Millisecond,
		"the probe answered on the one member")
	stopProbe()
	<-probed
	require.Less(t, longest, 10*time.Second, "the API answered through the scale-down but for leader elections")
	_, err = cms.Get(ctx, "before", metav1.GetOptions{})
	require.NoError(t, err, "data written before the scale-down is there")
}
