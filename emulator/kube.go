package emulator

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/emulator/kubecp"
	"github.com/rezuscloud/rezuscloud/emulator/kubelet"
)

// KubeConfig turns on the real Kubernetes parts of emulated nodes: each
// control plane runs a real etcd member and the real kube-apiserver,
// kube-controller-manager and kube-scheduler as child processes (package
// kubecp), and every node runs an emulated kubelet against them (package
// kubelet). Without it (Config.Kube nil) nodes are light: etcd is imitated
// and no Kubernetes API exists, which is what the scale tests use.
type KubeConfig struct {
	// ToolsDir holds the binaries hack/kube.sh builds (kube/<version>/…,
	// etcd/<version>/…).
	ToolsDir string
	// Log receives the children's output; default discarded.
	Log io.Writer
}

// KubeFromMode decides an on/off/auto switch of the real control plane: on
// needs the binaries under toolsDir (refused without them), auto uses them
// when they are built, off never. It answers nil for light nodes.
func KubeFromMode(mode, toolsDir string) (*KubeConfig, error) {
	switch mode {
	case "off":
		return nil, nil
	case "on", "auto":
	default:
		return nil, fmt.Errorf("%q is not on, off or auto", mode)
	}
	if len(kubecp.Available(toolsDir)) == 0 {
		if mode == "on" {
			return nil, fmt.Errorf("no Kubernetes binaries under %s: run `go tool task tools`", toolsDir)
		}
		return nil, nil
	}
	return &KubeConfig{ToolsDir: toolsDir}, nil
}

// KubeVersions are the Kubernetes versions built under toolsDir.
func KubeVersions(toolsDir string) []string { return kubecp.Available(toolsDir) }

// kubeSupervisor runs the Kubernetes parts of every node: one goroutine per
// node converges what runs to decideKube's decision, once a second and
// whenever poked. Run owns it; everything stops with Run's context.
type kubeSupervisor struct {
	e   *Emulator
	cfg KubeConfig
	dir string // per-node data under dir/<node>

	mu      sync.Mutex
	runners map[string]*kubeRunner
	// joining names, per cluster, the control plane joining etcd: one at a
	// time, as etcd takes one learner at a time (--max-learners 1) and a
	// second join racing the first stalled in CI.
	joining map[string]string
	// pki is each cluster's Kubernetes PKI, learnt from its control planes'
	// configs: a worker's config holds no CA keys, yet its kubelet needs a
	// certificate (Talos's trustd and CSR approval give it one).
	pki map[string]*clusterPKIs
}

// kubeRunner is the goroutine of one node and what it publishes to the others.
type kubeRunner struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	poke   chan struct{}

	// Published under kubeSupervisor.mu for the other nodes of the cluster.
	cluster   string
	member    *kubecp.Member // set while its etcd runs
	cp        *kubecp.Node   // set while its control plane runs
	kubelet   bool           // its kubelet runs
	memberID  uint64         // its etcd member id while its etcd runs
	cpVersion string         // the Kubernetes version of its running control plane
	klVersion string         // its running kubelet's version
	cpKey     string         // the kubeWant.cpKey its running control plane started with
	klKey     string         // the kubeWant.kubeletKey its running kubelet started with
	apiServer string         // host:port while its kube-apiserver runs
}

func newKubeSupervisor(e *Emulator, cfg KubeConfig, dir string) *kubeSupervisor {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	return &kubeSupervisor{e: e, cfg: cfg, dir: dir, runners: map[string]*kubeRunner{}, pki: map[string]*clusterPKIs{}, joining: map[string]string{}}
}

// run adds a runner for every node and removes those of deleted nodes until
// ctx ends, then waits for every runner to stop its processes.
func (k *kubeSupervisor) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		k.sync(ctx)
		select {
		case <-ctx.Done():
			k.mu.Lock()
			runners := make([]*kubeRunner, 0, len(k.runners))
			for _, r := range k.runners {
				runners = append(runners, r)
			}
			k.mu.Unlock()
			for _, r := range runners {
				<-r.done
			}
			return
		case <-tick.C:
		}
	}
}

func (k *kubeSupervisor) sync(ctx context.Context) {
	names := map[string]bool{}
	for _, st := range k.e.List() {
		names[st.Name] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for name := range names {
		if _, ok := k.runners[name]; !ok {
			rctx, cancel := context.WithCancel(ctx)
			r := &kubeRunner{name: name, cancel: cancel, done: make(chan struct{}), poke: make(chan struct{}, 1)}
			k.runners[name] = r
			go func() {
				defer close(r.done)
				k.runNode(rctx, r)
			}()
		}
	}
	for name, r := range k.runners {
		select {
		case <-r.done:
			delete(k.runners, name)
		default:
		}
	}
}

// running says which of a node's etcd and kubelet run, a kubelet only at
// the Kubernetes version of the node's config (st); nil in light mode.
func (k *kubeSupervisor) running(st NodeStatus) map[string]bool {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.runners[st.Name]
	if r == nil {
		return map[string]bool{}
	}
	return map[string]bool{"etcd": r.member != nil, "kubelet": r.kubelet && r.klVersion == st.KubernetesVersion}
}

// controlPlaneVersion is the version of the node's running Kubernetes
// components ("" while none run); real is false in light mode.
func (k *kubeSupervisor) controlPlaneVersion(node string) (version string, real bool) {
	if k == nil {
		return "", false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if r := k.runners[node]; r != nil {
		return r.cpVersion, true
	}
	return "", true
}

// refresh tells the node's COSI state (the Service resources health
// probes watch) that its etcd or kubelet started or stopped.
func (k *kubeSupervisor) refresh(node string) {
	if n, err := k.e.node(node); err == nil {
		k.e.refreshCOSI(n)
	}
}

// memberID is the real etcd member id of the node while its etcd runs.
func (k *kubeSupervisor) memberID(node string) (uint64, bool) {
	if k == nil {
		return 0, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.runners[node]
	if r == nil || r.member == nil || r.memberID == 0 {
		return 0, false
	}
	return r.memberID, true
}

// pokeAll wakes every runner (a node changed).
func (k *kubeSupervisor) pokeAll() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.runners {
		select {
		case r.poke <- struct{}{}:
		default:
		}
	}
}

// kubeView takes a node's view of the cluster.
func (e *Emulator) kubeView(name string) kubeView {
	n, err := e.node(name)
	if err != nil {
		return kubeView{}
	}
	n.mu.Lock()
	v := kubeView{exists: !n.deleted, node: n, st: n.st, cfg: n.cfg, bootID: n.bootID}
	n.mu.Unlock()
	if v.st.ClusterID != "" {
		v.bootstrapped = e.bootstrapped(v.st.ClusterID)
	}
	return v
}

// nodeRun is what runs on one node, owned by its runner goroutine.
type nodeRun struct {
	cp      *kubecp.Node
	cpKey   string
	etcdKey string
	kl      *kubelet.Kubelet
	klKey   string
	klStop  context.CancelFunc
	klDone  chan struct{}
	metaFor string // the config hash whose node labels and taints were applied
	// manifestsFor is the config hash whose bootstrap manifests (CoreDNS,
	// kube-proxy) were applied.
	manifestsFor string
	// waiting is the last reason logged for waiting, per part, so each is
	// logged once.
	waiting map[string]string
}

func (k *kubeSupervisor) runNode(ctx context.Context, r *kubeRunner) {
	var run nodeRun
	dir := filepath.Join(k.dir, r.name)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var served *node
	for {
		v := k.e.kubeView(r.name)
		if v.exists && served != nil && v.node != served {
			// The node was deleted and another created under its name
			// between two looks: what ran for the old one goes, as for a
			// deleted node, before the new one starts.
			k.e.cfg.Logf("node %s: a new node took the name: wiping its predecessor's Kubernetes data", r.name)
			k.converge(ctx, r, &run, kubeView{}, kubeWant{wipe: true}, dir)
		}
		if v.exists {
			served = v.node
		}
		w := decideKube(v)
		if v.st.Faults.KubeletDown {
			w.kubelet = false
		}
		if ctx.Err() != nil {
			w = kubeWant{} // the emulator stops: processes stop, data stays
		}
		k.converge(ctx, r, &run, v, w, dir)
		if w.wipe && !v.exists {
			return // deleted: its member is removed and its data is gone
		}
		if ctx.Err() != nil {
			// The emulator stopped while converge ran with what should
			// run: its processes stop now, or they outlive it.
			k.converge(ctx, r, &run, v, kubeWant{}, dir)
			return
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		case <-r.poke:
		}
	}
}

func (k *kubeSupervisor) waitf(r *kubeRunner, run *nodeRun, part, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if run.waiting == nil {
		run.waiting = map[string]string{}
	}
	if msg != run.waiting[part] {
		run.waiting[part] = msg
		k.e.cfg.Logf("node %s: %s %s", r.name, part, msg)
	}
}

func (k *kubeSupervisor) converge(ctx context.Context, r *kubeRunner, run *nodeRun, v kubeView, w kubeWant, dir string) {
	if v.cfg != nil && v.st.Role == "controlplane" {
		if pki, err := kubecp.PKIFromConfig(v.cfg); err == nil {
			k.learnPKI(v.st.ClusterID, pki)
		}
	}
	// The kubelet first: it stops before its control plane does. It posts
	// NotReady only when the machine goes down; a kubelet restarted for a
	// new version or new certificates just stops, as a restarted service.
	if run.kl != nil && (!w.kubelet || w.kubeletKey != run.klKey) {
		k.stopKubelet(r, run, !w.kubelet)
	}
	if run.cp != nil && w.wipe {
		// Deleted or reset while its etcd runs: it leaves etcd first, as
		// Talos's graceful reset does; a member removed once it is stopped
		// needs a quorum the others may not have (one of two).
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if err := run.cp.Leave(lctx); err != nil {
			k.e.cfg.Logf("node %s: leaving etcd: %v", r.name, err)
		}
		cancel()
	}
	if run.cp != nil && w.controlPlane && w.cpKey != run.cpKey && w.etcdKey == run.etcdKey {
		k.reissueControlPlane(ctx, r, run, v, w)
	}
	if run.cp != nil && (!w.controlPlane || w.cpKey != run.cpKey) {
		k.stopControlPlane(r, run)
	}
	if w.wipe {
		k.leaveEtcd(ctx, r, dir)
		if err := kubecp.WipeData(dir); err != nil {
			k.e.cfg.Logf("node %s: wiping its Kubernetes data: %v", r.name, err)
		}
		k.mu.Lock()
		r.cluster = ""
		k.mu.Unlock()
		run.metaFor = ""
		return
	}
	if ctx.Err() != nil {
		return
	}
	if w.wipeEtcd && run.cp == nil && hasMemberData(dir) {
		k.e.cfg.Logf("node %s: its cluster's etcd is not bootstrapped: removing the etcd data it held", r.name)
		if err := os.RemoveAll(filepath.Join(dir, "etcd")); err != nil {
			k.e.cfg.Logf("node %s: removing its etcd data: %v", r.name, err)
		}
	}
	if w.controlPlane && run.cp == nil {
		if err := k.startControlPlane(ctx, r, run, v, w, dir); err != nil {
			k.waitf(r, run, "control plane", "not started: %v", err)
		} else {
			delete(run.waiting, "control plane")
		}
	}
	if w.kubelet && run.kl == nil {
		if err := k.startKubelet(ctx, r, run, v, w); err != nil {
			k.waitf(r, run, "kubelet", "not started: %v", err)
		} else {
			delete(run.waiting, "kubelet")
		}
	}
	if run.cp != nil && v.bootstrapped && run.manifestsFor != v.st.ConfigHash {
		k.mu.Lock()
		apiServer := r.apiServer
		k.mu.Unlock()
		if err := k.applyBootstrapManifests(ctx, v, apiServer); err != nil {
			k.waitf(r, run, "bootstrap manifests", "not applied yet: %v", err)
		} else {
			run.manifestsFor = v.st.ConfigHash
		}
	}
	if run.kl != nil && run.metaFor != v.st.ConfigHash {
		if err := k.applyNodeMetadata(ctx, v); err != nil {
			k.waitf(r, run, "node labels and taints", "not applied yet: %v", err)
		} else {
			run.metaFor = v.st.ConfigHash
		}
	}
}
