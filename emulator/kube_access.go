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
