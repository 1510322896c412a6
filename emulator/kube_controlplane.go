package emulator

// The real control plane of an emulated node (Config.Kube): its etcd member
// and Kubernetes components started, joined to the cluster, and stopped.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/emulator/kubecp"
)

func (k *kubeSupervisor) stopControlPlane(r *kubeRunner, run *nodeRun) {
	k.mu.Lock()
	r.member, r.apiServer, r.cp, r.memberID, r.cpVersion, r.cpKey = nil, "", nil, 0, "", ""
	k.mu.Unlock()
	k.refresh(r.name)
	run.cp.Stop()
	run.cp, run.cpKey, run.etcdKey = nil, "", ""
}

// reissueControlPlane restarts the node's kube-apiserver, controller
// manager and scheduler with the Kubernetes PKI of its config, its etcd
// running on, as Talos rewrites its static pods when a config applied in
// place changes that PKI. Its API server is offered to no client while it
// restarts; the other control planes serve on. When that fails the whole
// control plane stops, and starts again on the next look.
func (k *kubeSupervisor) reissueControlPlane(ctx context.Context, r *kubeRunner, run *nodeRun, v kubeView, w kubeWant) {
	pki, err := kubecp.PKIFromConfig(v.cfg)
	if err == nil {
		k.mu.Lock()
		addr := r.apiServer
		r.apiServer = ""
		k.mu.Unlock()
		start := time.Now()
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		err = run.cp.Reissue(sctx, pki)
		cancel()
		if err == nil {
			k.e.cfg.Logf("node %s: kube-apiserver, controller-manager and scheduler restarted with the config's new PKI in %s",
				r.name, time.Since(start).Round(time.Millisecond))
			run.cpKey = w.cpKey
			k.mu.Lock()
			r.apiServer, r.cpKey = addr, w.cpKey
			k.mu.Unlock()
			k.refresh(r.name)
			return
		}
	}
	k.e.cfg.Logf("node %s: restarting its control plane with the config's new PKI: %v", r.name, err)
	k.stopControlPlane(r, run)
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
	run.cp, run.cpKey, run.etcdKey = cp, w.cpKey, w.etcdKey
	_ = os.Remove(restore) // restored: a later restart runs on the data
	id, err := localMemberID(sctx, cp)
	if err != nil {
		k.e.cfg.Logf("node %s: reading its etcd member id: %v", r.name, err)
	}
	k.mu.Lock()
	r.cluster = v.st.ClusterID
	r.member = &kubecp.Member{Name: r.name, PeerURL: peerURL, ClientURL: "https://" + net.JoinHostPort(ip, "2379")}
	r.apiServer = net.JoinHostPort(ip, "6443")
	r.cp, r.memberID, r.cpVersion, r.cpKey = cp, id, w.cpVersion, w.cpKey
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
	c, ok := k.pki[cluster]
	k.mu.Unlock()
	if via == nil || !ok {
		return
	}
	pki := c.latest
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
