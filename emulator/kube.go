package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

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
	// pki is each cluster's Kubernetes PKI, learnt from a control plane's
	// config: a worker's config holds no CA keys, yet its kubelet needs a
	// certificate (Talos's trustd and CSR approval give it one).
	pki map[string]kubecp.PKI
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
	apiServer string         // host:port while its kube-apiserver runs
}

func newKubeSupervisor(e *Emulator, cfg KubeConfig, dir string) *kubeSupervisor {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	return &kubeSupervisor{e: e, cfg: cfg, dir: dir, runners: map[string]*kubeRunner{}, pki: map[string]kubecp.PKI{}, joining: map[string]string{}}
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
	kl      *kubelet.Kubelet
	klKey   string
	klStop  context.CancelFunc
	klDone  chan struct{}
	metaFor string // the config hash whose node labels and taints were applied
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
		if ctx.Err() != nil {
			w = kubeWant{} // the emulator stops: processes stop, data stays
		}
		k.converge(ctx, r, &run, v, w, dir)
		if w.wipe && !v.exists {
			return // deleted: its member is removed and its data is gone
		}
		if ctx.Err() != nil {
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
			k.mu.Lock()
			k.pki[v.st.ClusterID] = pki
			k.mu.Unlock()
		}
	}
	// The kubelet first: it stops before its control plane does.
	if run.kl != nil && (!w.kubelet || w.kubeletKey != run.klKey) {
		k.stopKubelet(r, run)
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
	if run.kl != nil && run.metaFor != v.st.ConfigHash {
		if err := k.applyNodeMetadata(ctx, v); err != nil {
			k.waitf(r, run, "node labels and taints", "not applied yet: %v", err)
		} else {
			run.metaFor = v.st.ConfigHash
		}
	}
}

func (k *kubeSupervisor) stopKubelet(r *kubeRunner, run *nodeRun) {
	k.mu.Lock()
	r.kubelet, r.klVersion = false, ""
	k.mu.Unlock()
	k.refresh(r.name)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	run.kl.Shutdown(sctx)
	cancel()
	run.klStop()
	<-run.klDone
	run.kl, run.klKey, run.klStop, run.klDone = nil, "", nil, nil
}

func (k *kubeSupervisor) stopControlPlane(r *kubeRunner, run *nodeRun) {
	k.mu.Lock()
	r.member, r.apiServer, r.cp, r.memberID, r.cpVersion = nil, "", nil, 0, ""
	k.mu.Unlock()
	k.refresh(r.name)
	run.cp.Stop()
	run.cp, run.cpKey = nil, ""
}

// members are the running etcd members of a cluster other than the node's own.
func (k *kubeSupervisor) members(cluster, except string) []kubecp.Member {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ms []kubecp.Member
	for _, o := range k.runners {
		if o.name != except && o.cluster == cluster && o.member != nil {
			ms = append(ms, *o.member)
		}
	}
	slices.SortFunc(ms, func(a, b kubecp.Member) int { return compareStrings(a.Name, b.Name) })
	return ms
}

// apiServers are the addresses of a cluster's running kube-apiservers.
func (k *kubeSupervisor) apiServers(cluster string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var as []string
	for _, o := range k.runners {
		if o.cluster == cluster && o.apiServer != "" {
			as = append(as, o.apiServer)
		}
	}
	slices.Sort(as)
	return as
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func hasMemberData(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "etcd", "member"))
	return err == nil
}

func (k *kubeSupervisor) startControlPlane(ctx context.Context, r *kubeRunner, run *nodeRun, v kubeView, w kubeWant, dir string) error {
	if !k.e.Loopback() {
		// In ports mode every node is 127.0.0.1: their etcd and API server
		// ports would collide.
		return errors.New("the real control plane needs loopback addressing (a loopback IP per node)")
	}
	bins, err := kubecp.FindBinaries(k.cfg.ToolsDir, w.cpVersion)
	if err != nil {
		return err
	}
	pki, err := kubecp.PKIFromConfig(v.cfg)
	if err != nil {
		return err
	}
	ip := v.st.Address
	if host, _, err := net.SplitHostPort(ip); err == nil {
		ip = host
	}
	cc := kubecp.Config{
		Name: r.name, Address: ip, DataDir: dir,
		Endpoint: v.cfg.Cluster().Endpoint().String(), ClusterName: v.cfg.Cluster().Name(),
		PKI: pki, Binaries: bins, Log: k.cfg.Log,
	}
	if cidrs := v.cfg.Cluster().Network().ServiceCIDRs(); len(cidrs) > 0 {
		cc.ServiceCIDR = cidrs[0]
	}
	if cidrs := v.cfg.Cluster().Network().PodCIDRs(); len(cidrs) > 0 {
		cc.PodCIDR = cidrs[0]
	}
	peerURL := "https://" + net.JoinHostPort(ip, "2380")
	restore := filepath.Join(dir, restoreFile)
	if _, err := os.Stat(restore); err == nil && v.st.Bootstrapped {
		// A recovering bootstrap: etcd starts on the restored snapshot.
		if err := restoreEtcd(ctx, bins.Etcdutl, dir, r.name, peerURL); err != nil {
			return err
		}
		k.e.cfg.Logf("node %s: etcd restored from the uploaded snapshot", r.name)
	}
	if !hasMemberData(dir) {
		others := k.members(v.st.ClusterID, r.name)
		switch {
		case len(others) > 0:
			cc.Join = others
		case v.st.Bootstrapped:
			cc.Bootstrap = true
		default:
			return errors.New("waiting for a running etcd member of the cluster to join through")
		}
	}
	if len(cc.Join) > 0 {
		k.mu.Lock()
		if other := k.joining[v.st.ClusterID]; other != "" && other != r.name {
			k.mu.Unlock()
			return fmt.Errorf("waiting for %s to finish joining etcd", other)
		}
		k.joining[v.st.ClusterID] = r.name
		k.mu.Unlock()
		defer func() {
			k.mu.Lock()
			delete(k.joining, v.st.ClusterID)
			k.mu.Unlock()
		}()
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	start := time.Now()
	cp, err := kubecp.Start(sctx, cc)
	if err != nil {
		return err
	}
	k.e.cfg.Logf("node %s: control plane %s running (etcd, kube-apiserver, controller-manager, scheduler) in %s",
		r.name, w.cpVersion, time.Since(start).Round(time.Millisecond))
	run.cp, run.cpKey = cp, w.cpKey
	_ = os.Remove(restore) // restored: a later restart runs on the data
	id, err := localMemberID(sctx, cp)
	if err != nil {
		k.e.cfg.Logf("node %s: reading its etcd member id: %v", r.name, err)
	}
	k.mu.Lock()
	r.cluster = v.st.ClusterID
	r.member = &kubecp.Member{Name: r.name, PeerURL: peerURL, ClientURL: "https://" + net.JoinHostPort(ip, "2379")}
	r.apiServer = net.JoinHostPort(ip, "6443")
	r.cp, r.memberID, r.cpVersion = cp, id, w.cpVersion
	k.mu.Unlock()
	k.refresh(r.name)
	return nil
}

// localMemberID is the id of the node's own etcd member.
func localMemberID(ctx context.Context, cp *kubecp.Node) (uint64, error) {
	cli, err := cp.Etcd(ctx)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	eps := cli.Endpoints()
	if len(eps) == 0 {
		return 0, errors.New("no endpoint")
	}
	st, err := cli.Status(ctx, eps[0])
	if err != nil {
		return 0, err
	}
	return st.Header.MemberId, nil
}

// leaveEtcd removes a wiped or deleted control plane's member through
// another member, as Talos's reset does (leaveEtcd) and as the light mode
// does by deriving membership from the nodes.
func (k *kubeSupervisor) leaveEtcd(ctx context.Context, r *kubeRunner, dir string) {
	k.mu.Lock()
	cluster := r.cluster
	k.mu.Unlock()
	if cluster == "" || !hasMemberData(dir) {
		return
	}
	k.removeMember(ctx, cluster, r.name)
}

// removeMember removes the member named name through a running member of the cluster.
func (k *kubeSupervisor) removeMember(ctx context.Context, cluster, name string) {
	k.mu.Lock()
	var via *kubeRunner
	for _, o := range k.runners {
		if o.name != name && o.cluster == cluster && o.member != nil {
			via = o
		}
	}
	pki, ok := k.pki[cluster]
	k.mu.Unlock()
	if via == nil || !ok {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cli, err := kubecp.EtcdClient(rctx, pki.EtcdCA, []string{via.member.ClientURL})
	if err != nil {
		k.e.cfg.Logf("node %s: leaving etcd: %v", name, err)
		return
	}
	defer cli.Close()
	if err := kubecp.MemberRemove(rctx, cli, name); err != nil {
		k.e.cfg.Logf("node %s: leaving etcd: %v", name, err)
	}
}

// restConfig is a client of a cluster's API as cn/orgs: it goes to the
// cluster's endpoint while that answers and else to any running
// kube-apiserver of the cluster, as Talos's KubePrism load-balances a
// node's kubelet over the control planes.
func (k *kubeSupervisor) restConfig(v kubeView, pki kubecp.PKI, cn string, orgs []string) (*rest.Config, error) {
	endpoint := v.cfg.Cluster().Endpoint()
	kc, err := kubecp.IssueClientKubeconfig(pki.KubeCA, endpoint.String(), cn, orgs, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, err
	}
	cluster := v.st.ClusterID
	want := endpointHostPort(endpoint)
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	rc.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		candidates := []string{addr}
		if addr == want {
			// The endpoint first while one of the cluster's API servers
			// is on it, else the running ones first: an endpoint nobody
			// serves (a load balancer that is not emulated) would cost
			// each request a dial timeout.
			servers := k.apiServers(cluster)
			if !slices.Contains(servers, addr) {
				candidates = append(servers, addr)
			} else {
				for _, a := range servers {
					if a != addr {
						candidates = append(candidates, a)
					}
				}
			}
		}
		var errs []error
		for _, a := range candidates {
			c, err := dialer.DialContext(ctx, network, a)
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	rc.Timeout = 15 * time.Second
	return rc, nil
}

func endpointHostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func (k *kubeSupervisor) clusterPKI(cluster string) (kubecp.PKI, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.pki[cluster]
	return p, ok
}

func (k *kubeSupervisor) startKubelet(ctx context.Context, r *kubeRunner, run *nodeRun, v kubeView, w kubeWant) error {
	pki, ok := k.clusterPKI(v.st.ClusterID)
	if !ok {
		return errors.New("no control plane of the cluster has shown its Kubernetes CA yet")
	}
	if len(k.apiServers(v.st.ClusterID)) == 0 {
		return errors.New("waiting for a kube-apiserver of the cluster")
	}
	rc, err := k.restConfig(v, pki, "system:node:"+r.name, []string{"system:nodes"})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ip := v.st.Address
	if host, _, err := net.SplitHostPort(ip); err == nil {
		ip = host
	}
	var static []kubelet.StaticPod
	if v.st.Role == "controlplane" && v.bootstrapped && !v.st.EtcdLeft {
		c := v.cfg.Cluster()
		static = []kubelet.StaticPod{
			{Name: "kube-apiserver", Image: c.APIServer().Image()},
			{Name: "kube-controller-manager", Image: c.ControllerManager().Image()},
			{Name: "kube-scheduler", Image: c.Scheduler().Image()},
		}
	}
	kl, err := kubelet.New(kubelet.Config{
		NodeName: r.name, Address: ip, Client: cs, Version: w.kubeletVersion, StaticPods: static,
		OSImage: "Talos (" + v.st.Version + ")",
		Logf: func(format string, args ...any) {
			k.e.cfg.Logf("node %s: kubelet: %s", r.name, fmt.Sprintf(format, args...))
		},
	})
	if err != nil {
		return err
	}
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := kl.Run(kctx); err != nil && kctx.Err() == nil {
			k.e.cfg.Logf("node %s: kubelet stopped: %v", r.name, err)
		}
	}()
	run.kl, run.klKey, run.klStop, run.klDone = kl, w.kubeletKey, cancel, done
	k.mu.Lock()
	if r.cluster == "" {
		r.cluster = v.st.ClusterID
	}
	r.kubelet, r.klVersion = true, w.kubeletVersion
	k.mu.Unlock()
	k.refresh(r.name)
	return nil
}

// applyNodeMetadata is what Talos's machined does with admin credentials
// once the Node exists: the control-plane role label, the config's
// machine.nodeLabels and machine.nodeTaints.
func (k *kubeSupervisor) applyNodeMetadata(ctx context.Context, v kubeView) error {
	pki, ok := k.clusterPKI(v.st.ClusterID)
	if !ok {
		return errors.New("no Kubernetes CA yet")
	}
	rc, err := k.restConfig(v, pki, "talos:machined", []string{"system:masters"})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	var taints []corev1.Taint
	for key, val := range v.cfg.Machine().NodeTaints() {
		value, effect := splitTaint(val)
		taints = append(taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)})
	}
	slices.SortFunc(taints, func(a, b corev1.Taint) int { return compareStrings(a.Key, b.Key) })
	mctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return kubelet.ApplyNodeMetadata(mctx, cs, v.st.Name, v.cfg.Machine().NodeLabels(), taints,
		v.st.Role == "controlplane", v.cfg.Cluster().ScheduleOnControlPlanes())
}

// splitTaint splits a Talos nodeTaints value "value:Effect" (or ":Effect", or
// "Effect") into its value and effect.
func splitTaint(s string) (value, effect string) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			return s[:i], s[i+1:]
		}
	}
	return "", s
}

// AdminKubeconfig returns a cluster-admin kubeconfig for the cluster of the
// named control plane, for tests and the HTTP API: its endpoint is the
// cluster's control-plane endpoint.
func (e *Emulator) AdminKubeconfig(node string) ([]byte, error) {
	if e.kube == nil {
		return nil, errors.New("the emulator runs no Kubernetes control plane (light mode)")
	}
	v := e.kubeView(node)
	if v.cfg == nil {
		return nil, fmt.Errorf("node %s is not configured", node)
	}
	pki, ok := e.kube.clusterPKI(v.st.ClusterID)
	if !ok {
		return nil, fmt.Errorf("no control plane of node %s's cluster has run yet", node)
	}
	return kubecp.IssueClientKubeconfig(pki.KubeCA, v.cfg.Cluster().Endpoint().String(), "admin", []string{"system:masters"}, time.Hour)
}
