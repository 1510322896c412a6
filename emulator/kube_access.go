package emulator

// Clients of an emulated cluster's real apiservers: the supervisor's own and
// the admin kubeconfig handed out.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/emulator/kubecp"
)

// restConfig is a client of a cluster's API as cn/orgs: it goes to the
// cluster's endpoint while that answers and else to any running
// kube-apiserver of the cluster, as Talos's KubePrism load-balances a
// node's kubelet over the control planes.
func (k *kubeSupervisor) restConfig(v kubeView, pki kubecp.PKI, cn string, orgs []string) (*rest.Config, error) {
	endpoint := v.cfg.Cluster().Endpoint()
	// It trusts cluster.ca and the accepted CAs, as Talos's kubelet does:
	// across a rotation's stages an API server may serve either.
	kc, err := kubecp.IssueClientKubeconfig(pki.KubeCA, kubeTrust(v.cfg), endpoint.String(), cn, orgs, 24*time.Hour)
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

// clusterPKIs is what the supervisor learnt of one cluster's Kubernetes
// PKI: the latest a control plane showed, and every Kubernetes CA with its
// key by certificate (certID), so a node whose config names a CA gets its
// client certificates from that one while control planes have moved on (a
// rotation's stages), as it keeps the certificate that CA gave it on Talos.
type clusterPKIs struct {
	latest kubecp.PKI
	byCA   map[string]kubecp.CertAndKey
}

func (k *kubeSupervisor) learnPKI(cluster string, pki kubecp.PKI) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.pki[cluster]
	if c == nil {
		c = &clusterPKIs{byCA: map[string]kubecp.CertAndKey{}}
		k.pki[cluster] = c
	}
	c.latest = pki
	c.byCA[certID(pki.KubeCA.Cert)] = pki.KubeCA
}

// clusterPKI is the PKI a node of the cluster whose config is cfg gets its
// certificates from: the cluster's latest, with the Kubernetes CA its
// cluster.ca names when a control plane showed its key.
func (k *kubeSupervisor) clusterPKI(cluster string, cfg config.Provider) (kubecp.PKI, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.pki[cluster]
	if !ok {
		return kubecp.PKI{}, false
	}
	p := c.latest
	if ca := cfg.Cluster().IssuingCA(); ca != nil {
		if kube, ok := c.byCA[certID(ca.Crt)]; ok {
			p.KubeCA = kube
		}
	}
	return p, true
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
	pki, ok := e.kube.clusterPKI(v.st.ClusterID, v.cfg)
	if !ok {
		return nil, fmt.Errorf("no control plane of node %s's cluster has run yet", node)
	}
	return kubecp.IssueClientKubeconfig(pki.KubeCA, kubeTrust(v.cfg), v.cfg.Cluster().Endpoint().String(), "admin", []string{"system:masters"}, time.Hour)
}
