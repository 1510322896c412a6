package kubecp

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// componentCertTTL is how long the certificates a node issues itself are
// valid; they are issued again at every Start, as Talos renews its own.
const componentCertTTL = 365 * 24 * time.Hour

// nodePKI is where a node's certificates, keys and kubeconfigs are written
// (DataDir/pki), plus what stays in memory for the node's own clients.
type nodePKI struct {
	dir string

	etcdClient CertAndKey // the node's own etcd client (Etcd, health)
	admin      []byte     // admin kubeconfig for https://<Address>:6443
	adminCert  CertAndKey // its client certificate, for /readyz
}

func (p nodePKI) path(name string) string { return filepath.Join(p.dir, name) }

// writeNodePKI issues every certificate of a control plane, the way Talos
// does, and writes them with the kubeconfigs and the scheduler's config.
func writeNodePKI(cfg Config) (nodePKI, error) {
	p := nodePKI{dir: filepath.Join(cfg.DataDir, "pki")}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return p, err
	}
	ip := net.ParseIP(cfg.Address)
	loopback := net.ParseIP("127.0.0.1")
	// etcd's names: its node name, the node's IP and loopback.
	err := p.issueAll([]pairSpec{
		{"etcd-server", cfg.PKI.EtcdCA, certSpec{cn: cfg.Name, dns: []string{cfg.Name, "localhost"}, ips: []net.IP{ip, loopback}, server: true, client: true}},
		{"etcd-peer", cfg.PKI.EtcdCA, certSpec{cn: cfg.Name, dns: []string{cfg.Name}, ips: []net.IP{ip, loopback}, server: true, client: true}},
	})
	if err != nil {
		return p, err
	}
	if p.etcdClient, err = issue(cfg.PKI.EtcdCA, certSpec{cn: "kubecp", client: true, ttl: componentCertTTL}); err != nil {
		return p, err
	}
	if err := os.WriteFile(p.path("etcd-ca.crt"), cfg.PKI.EtcdCA.Cert, 0o600); err != nil {
		return p, err
	}
	return writeKubePKI(cfg, p)
}

// writeKubePKI issues the certificates, keys and kubeconfigs of the
// Kubernetes components into p, leaving etcd's alone: what Talos rewrites
// for the static pods when the Kubernetes PKI in the config changes.
func writeKubePKI(cfg Config, p nodePKI) (nodePKI, error) {
	server := "https://" + net.JoinHostPort(cfg.Address, "6443")
	apiDNS, apiIPs, err := apiServerSANs(cfg)
	if err != nil {
		return p, err
	}
	err = p.issueAll([]pairSpec{
		{"apiserver", cfg.PKI.KubeCA, certSpec{cn: "kube-apiserver", dns: apiDNS, ips: apiIPs, server: true}},
		{"apiserver-kubelet-client", cfg.PKI.KubeCA, certSpec{cn: "apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true}},
		{"front-proxy-client", cfg.PKI.AggregatorCA, certSpec{cn: "front-proxy-client", client: true}},
		{"apiserver-etcd-client", cfg.PKI.EtcdCA, certSpec{cn: "kube-apiserver", client: true}},
	})
	if err != nil {
		return p, err
	}

	saPub, err := serviceAccountPublicKey(cfg.PKI.ServiceAccountKey)
	if err != nil {
		return p, fmt.Errorf("service account key: %w", err)
	}
	files := map[string][]byte{
		"kube-ca.crt":         cfg.PKI.KubeCA.Cert,
		"kube-client-ca.crt":  cfg.PKI.KubeTrust(),
		"kube-ca.key":         cfg.PKI.KubeCA.Key,
		"aggregator-ca.crt":   cfg.PKI.AggregatorCA.Cert,
		"service-account.key": cfg.PKI.ServiceAccountKey,
		"service-account.pub": saPub,
	}
	for _, k := range []struct{ file, cn string }{
		{"controller-manager.kubeconfig", "system:kube-controller-manager"},
		{"scheduler.kubeconfig", "system:kube-scheduler"},
	} {
		if files[k.file], err = IssueClientKubeconfig(cfg.PKI.KubeCA, cfg.PKI.KubeTrust(), server, k.cn, nil, componentCertTTL); err != nil {
			return p, err
		}
	}
	if p.adminCert, err = issue(cfg.PKI.KubeCA, certSpec{cn: "admin", orgs: []string{"system:masters"}, client: true, ttl: componentCertTTL}); err != nil {
		return p, err
	}
	if p.admin, err = kubeconfig(cfg.PKI.KubeTrust(), server, "admin", p.adminCert); err != nil {
		return p, err
	}
	files["admin.kubeconfig"] = p.admin
	files["scheduler.yaml"] = []byte(fmt.Sprintf(schedulerConfig, p.path("scheduler.kubeconfig")))
	for name, b := range files {
		if err := os.WriteFile(p.path(name), b, 0o600); err != nil {
			return p, err
		}
	}
	return p, nil
}

// pairSpec is one certificate to issue and write as name.crt and name.key.
type pairSpec struct {
	name string
	ca   CertAndKey
	spec certSpec
}

func (p nodePKI) issueAll(specs []pairSpec) error {
	for _, s := range specs {
		s.spec.ttl = componentCertTTL
		c, err := issue(s.ca, s.spec)
		if err != nil {
			return fmt.Errorf("issuing %s: %w", s.name, err)
		}
		if err := p.writePair(s.name, c); err != nil {
			return err
		}
	}
	return nil
}

func (p nodePKI) writePair(name string, c CertAndKey) error {
	if err := os.WriteFile(p.path(name+".crt"), c.Cert, 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.path(name+".key"), c.Key, 0o600)
}

// schedulerConfig is the KubeSchedulerConfiguration Talos writes
// (--kubeconfig is deprecated for the scheduler).
const schedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
leaderElection:
  leaderElect: true
`

// apiServerSANs are the names of kube-apiserver's serving certificate, as
// Talos gives them: the control-plane endpoint's host, the node's address,
// loopback, the in-cluster names of the kubernetes Service and its
// ClusterIP (the first address of the service CIDR).
func apiServerSANs(cfg Config) (dns []string, ips []net.IP, err error) {
	dns = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc." + cfg.DNSDomain}
	ips = []net.IP{net.ParseIP(cfg.Address), net.ParseIP("127.0.0.1")}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil {
		return nil, nil, fmt.Errorf("control-plane endpoint %q: %w", cfg.Endpoint, err)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil {
		ips = append(ips, ip)
	} else if u.Hostname() != "" {
		dns = append(dns, u.Hostname())
	}
	svc, err := firstServiceIP(cfg.ServiceCIDR)
	if err != nil {
		return nil, nil, err
	}
	ips = append(ips, svc)
	return dns, ips, nil
}

// firstServiceIP is the ClusterIP of the kubernetes Service: the first
// address of the service CIDR (10.96.0.1 of 10.96.0.0/12).
func firstServiceIP(cidr string) (net.IP, error) {
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w", cidr, err)
	}
	return net.IP(pfx.Masked().Addr().Next().AsSlice()), nil
}
