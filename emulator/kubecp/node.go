package kubecp

import (
	"bytes"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Node is the running control plane of one node. Its children outlive the
// context of Start; Stop ends them.
type Node struct {
	cfg Config  // as started: its etcd CA never changes, its Kubernetes PKI may (kube)
	pki nodePKI // where the certificates are, and etcd's

	mu    sync.Mutex
	procs []*process // in start order: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
	kube  kubeCreds
}

// kubeCreds is the Kubernetes PKI the components run with, which Reissue
// replaces, and the node's own admin credentials issued from it.
type kubeCreds struct {
	pki       PKI
	admin     []byte
	adminCert CertAndKey
}

// Start starts etcd and waits until it is healthy (joining or
// bootstrapping as cfg says), then kube-apiserver and waits for /readyz,
// then the controller manager and the scheduler. ctx bounds the start
// only; on an error every child started is stopped again.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "logs"), 0o700); err != nil {
		return nil, err
	}
	p, err := writeNodePKI(cfg)
	if err != nil {
		return nil, fmt.Errorf("control plane of %s: %w", cfg.Name, err)
	}
	n := &Node{cfg: cfg, pki: p, kube: kubeCreds{pki: cfg.PKI, admin: p.admin, adminCert: p.adminCert}}
	if err := n.start(ctx); err != nil {
		n.Stop()
		return nil, fmt.Errorf("starting the control plane of %s: %w", cfg.Name, err)
	}
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	if err := n.startEtcd(ctx); err != nil {
		return err
	}
	return n.startKubernetes(ctx, n.cfg, n.pki)
}

// startKubernetes starts kube-apiserver and waits for /readyz, then the
// controller manager and the scheduler, with cfg's Kubernetes PKI written in p.
func (n *Node) startKubernetes(ctx context.Context, cfg Config, p nodePKI) error {
	api, err := n.run("kube-apiserver", cfg.Binaries.APIServer, cfg.Binaries.KubeVersion, apiServerArgs(cfg, p))
	if err != nil {
		return err
	}
	if err := waitFor(ctx, api, n.apiServerReady); err != nil {
		return err
	}
	if _, err := n.run("kube-controller-manager", cfg.Binaries.ControllerManager, cfg.Binaries.KubeVersion, controllerManagerArgs(cfg, p)); err != nil {
		return err
	}
	_, err = n.run("kube-scheduler", cfg.Binaries.Scheduler, cfg.Binaries.KubeVersion, schedulerArgs(cfg, p))
	return err
}

// Reissue restarts kube-apiserver, the controller manager and the scheduler
// with certificates, keys and kubeconfigs issued again from pki, as Talos
// rewrites its control-plane static pods when the Kubernetes PKI of the
// machine config changes (a rotation's stages); etcd runs on. The etcd CA
// cannot change so (Talos cannot rotate it either): that takes Stop and
// Start. ctx bounds the start; on an error the Kubernetes components may
// be down, and Stop is what is left to do.
func (n *Node) Reissue(ctx context.Context, pki PKI) error {
	if !bytes.Equal(pki.EtcdCA.Cert, n.cfg.PKI.EtcdCA.Cert) {
		return fmt.Errorf("control plane of %s: the etcd CA cannot change while etcd runs", n.cfg.Name)
	}
	cfg := n.cfg
	cfg.PKI = pki
	if err := cfg.Validate(); err != nil {
		return err
	}
	n.stopKubernetes()
	n.mu.Lock()
	n.procs = slices.DeleteFunc(n.procs, func(p *process) bool { return p.name != "etcd" })
	n.mu.Unlock()
	p, err := writeKubePKI(cfg, n.pki)
	if err != nil {
		return fmt.Errorf("control plane of %s: %w", cfg.Name, err)
	}
	n.mu.Lock()
	n.kube = kubeCreds{pki: pki, admin: p.admin, adminCert: p.adminCert}
	n.mu.Unlock()
	if err := n.startKubernetes(ctx, cfg, p); err != nil {
		return fmt.Errorf("restarting the Kubernetes components of %s: %w", cfg.Name, err)
	}
	return nil
}

func (n *Node) kubeCreds() kubeCreds {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kube
}

// startEtcd starts etcd as a new cluster, a joining learner or on its data,
// waits until it is healthy and promotes it if it is a learner: the
// apiserver cannot use a learner.
func (n *Node) startEtcd(ctx context.Context) error {
	self := n.cfg.member()
	initial, state := self.Name+"="+self.PeerURL, "new" // a member with data ignores both
	var join *clientv3.Client
	defer func() {
		if join != nil {
			_ = join.Close()
		}
	}()
	switch {
	case hasEtcdData(n.cfg.DataDir):
		// A restart: the other members need not run yet (they may be
		// restarting too), so the join client waits until it is needed.
	case len(n.cfg.Join) > 0:
		var err error
		if join, err = n.joinClient(ctx); err != nil {
			return err
		}
		if initial, err = addLearner(ctx, join, self); err != nil {
			return err
		}
		state = "existing"
	case !n.cfg.Bootstrap:
		return errors.New("etcd has no data, and neither bootstrap nor members to join were given")
	}

	etcd, err := n.run("etcd", n.cfg.Binaries.Etcd, n.cfg.Binaries.EtcdVersion, etcdArgs(n.cfg, n.pki, initial, state))
	if err != nil {
		return err
	}
	cli, err := etcdClient(n.cfg.PKI.EtcdCA.Cert, n.pki.etcdClient, []string{self.ClientURL})
	if err != nil {
		return err
	}
	defer cli.Close()
	var learner bool
	err = waitFor(ctx, etcd, func(ctx context.Context) error {
		st, err := etcdStatus(ctx, cli, self.ClientURL)
		if err == nil {
			learner = st.IsLearner
		}
		return err
	})
	if err != nil || !learner {
		return err
	}
	if join == nil {
		if len(n.cfg.Join) == 0 {
			return errors.New("etcd is a learner (a join was interrupted) and no members were given to promote it through")
		}
		if join, err = n.joinClient(ctx); err != nil {
			return err
		}
	}
	return promote(ctx, join, self.Name)
}

// joinClient is a client of the members in Config.Join.
func (n *Node) joinClient(ctx context.Context) (*clientv3.Client, error) {
	endpoints := make([]string, len(n.cfg.Join))
	for i, m := range n.cfg.Join {
		endpoints[i] = m.ClientURL
	}
	cli, err := EtcdClient(ctx, n.cfg.PKI.EtcdCA, endpoints)
	if err != nil {
		return nil, fmt.Errorf("joining etcd: %w", err)
	}
	return cli, nil
}

// run starts a child and adds it to the node.
func (n *Node) run(name, path, version string, args []string) (*process, error) {
	sink := newLogSink("["+name+" "+n.cfg.Name+"] ", n.cfg.Log, filepath.Join(n.cfg.DataDir, "logs", name+".log"))
	p, err := startProcess(name, version, path, args, sink)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.procs = append(n.procs, p)
	n.mu.Unlock()
	return p, nil
}

// startPoll is how often Start checks whether a child is up yet.
const startPoll = 200 * time.Millisecond

// waitFor polls ready until it succeeds, the child exits (its last lines
// are the error) or ctx ends.
func waitFor(ctx context.Context, p *process, ready func(context.Context) error) error {
	start := time.Now()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(rctx)
		cancel()
		if err == nil {
			p.log.note(fmt.Sprintf("%s ready after %s", p.name, time.Since(start).Round(time.Millisecond)))
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited while starting:\n%s", p.name, p.log.lastLines())
		}
		if sleepCtx(ctx, startPoll) != nil {
			return fmt.Errorf("%s not ready: %w (last: %w)", p.name, ctx.Err(), err)
		}
	}
}

// Stop stops the children and waits for them: SIGTERM, then SIGKILL after
// 10 s. The Kubernetes components stop first, together (one stuck on an
// etcd that is gone costs one grace period, not three), then etcd, once
// its clients are gone. DataDir stays. Stop is idempotent.
func (n *Node) Stop() {
	n.stopKubernetes()
	for _, p := range n.processes() {
		p.stop(stopGrace) // etcd; the others are stopped already
	}
}

// stopKubernetes stops the Kubernetes components, leaving etcd running.
func (n *Node) stopKubernetes() {
	var wg sync.WaitGroup
	for _, p := range n.processes() {
		if p.name != "etcd" {
			wg.Go(func() { p.stop(stopGrace) })
		}
	}
	wg.Wait()
}

func (n *Node) processes() []*process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.procs)
}

// Leave takes the node out of its cluster as a Talos reset does: the
// Kubernetes components stop, the node's etcd member is removed through
// the other members while it still runs (so two members going down to one
// keep quorum for the change), and etcd stops. The data stays for
// WipeData. The last member cannot leave: then nothing stops.
func (n *Node) Leave(ctx context.Context) error {
	self, err := n.Etcd(ctx)
	if err != nil {
		return fmt.Errorf("leaving etcd: %w", err)
	}
	defer self.Close()
	list, err := self.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("leaving etcd: listing members: %w", err)
	}
	var others []string
	for _, m := range list.Members {
		if m.Name != n.cfg.Name {
			others = append(others, m.ClientURLs...)
		}
	}
	if len(others) == 0 {
		return fmt.Errorf("leaving etcd: %s is its last member", n.cfg.Name)
	}
	cli, err := etcdClient(n.cfg.PKI.EtcdCA.Cert, n.pki.etcdClient, others)
	if err != nil {
		return fmt.Errorf("leaving etcd: %w", err)
	}
	defer cli.Close()
	n.stopKubernetes()
	err = MemberRemove(ctx, cli, n.cfg.Name)
	n.Stop()
	return err
}

// Processes describes the children, in start order.
func (n *Node) Processes() []ProcessInfo {
	var out []ProcessInfo
	for _, p := range n.processes() {
		out = append(out, p.info())
	}
	return out
}

// Etcd returns a client of the node's own etcd member, with a client
// certificate from the etcd CA; the caller closes it.
func (n *Node) Etcd(ctx context.Context) (*clientv3.Client, error) {
	cli, err := etcdClient(n.cfg.PKI.EtcdCA.Cert, n.pki.etcdClient, []string{n.cfg.member().ClientURL})
	if err != nil {
		return nil, err
	}
	if _, err := cli.Status(ctx, n.cfg.member().ClientURL); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("reaching etcd of %s: %w", n.cfg.Name, err)
	}
	return cli, nil
}

// Member is the node's etcd member.
func (n *Node) Member() Member { return n.cfg.member() }

// AdminKubeconfig is a kubeconfig for the node's own kube-apiserver
// (https://<Address>:6443) as admin in system:masters.
func (n *Node) AdminKubeconfig() []byte { return n.kubeCreds().admin }

// Healthy reports whether etcd has a leader and kube-apiserver's /readyz is ok.
func (n *Node) Healthy(ctx context.Context) error {
	cli, err := n.Etcd(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := etcdStatus(ctx, cli, n.cfg.member().ClientURL); err != nil {
		return fmt.Errorf("etcd of %s: %w", n.cfg.Name, err)
	}
	return n.apiServerReady(ctx)
}

func (n *Node) apiServerReady(ctx context.Context) error {
	creds := n.kubeCreds()
	pair, err := tls.X509KeyPair(creds.adminCert.Cert, creds.adminCert.Key)
	if err != nil {
		return err
	}
	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(creds.pki.KubeCA.Cert)
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		Proxy:             nil,
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiServerURL(n.cfg.Address)+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-apiserver of %s: /readyz: %s: %s", n.cfg.Name, resp.Status, body)
	}
	return nil
}

// WipeData removes what a node keeps in dataDir but its logs: etcd's data
// (the member), certificates and kubeconfigs, as a Talos reset wipes the
// EPHEMERAL partition. The node must be stopped.
func WipeData(dataDir string) error {
	entries, err := os.ReadDir(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "logs" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dataDir, e.Name())); err != nil {
			return fmt.Errorf("wiping %s: %w", dataDir, err)
		}
	}
	return nil
}
