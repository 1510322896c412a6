// Package kubeclient gives RezusCloud's controllers a Kubernetes client per
// tenant: client-go on a short-lived client certificate issued from the
// tenant's Kubernetes CA (talos.Service.ControllerCredentials), which stays
// in memory and is never logged. One clientset per tenant is kept and
// reused (one connection pool); it is replaced when the certificate nears
// its end or the tenant's API endpoint changes. Every request is bounded by
// a timeout. The sagas use it (through their own small interfaces) to
// cordon, drain, uncordon and delete Nodes.
package kubeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/talos"
)

// CredentialSource issues a controller's credentials for a tenant (a
// *talos.Service).
type CredentialSource interface {
	ControllerCredentials(ctx context.Context, tenant string) (*talos.ControllerCredentials, error)
}

// Clients caches one clientset per tenant.
type Clients struct {
	src CredentialSource
	// Timeout bounds one request; default 15s.
	Timeout time.Duration
	// Renew is how long before the certificate ends a new one is issued;
	// default 15m.
	Renew time.Duration
	now   func() time.Time

	mu      sync.Mutex
	tenants map[string]entry
	// rbac is when each tenant's access bindings were last found in place.
	rbac map[string]time.Time
}

type entry struct {
	cs       kubernetes.Interface
	cred     *talos.ControllerCredentials
	server   string
	notAfter time.Time
	checked  time.Time
}

// New returns a cache of clients on credentials from src.
func New(src CredentialSource) *Clients {
	return &Clients{src: src, Timeout: 15 * time.Second, Renew: 15 * time.Minute, now: time.Now, tenants: map[string]entry{}, rbac: map[string]time.Time{}}
}

// recheck is how often a cached client's endpoint is compared with the
// tenant's current one (its first control plane may have changed).
const recheck = time.Minute

// For returns the tenant's clientset.
func (c *Clients) For(ctx context.Context, tenant string) (kubernetes.Interface, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.tenants[tenant]
	c.mu.Unlock()
	if ok && now.Before(e.notAfter.Add(-c.Renew)) && now.Sub(e.checked) < recheck {
		return e.cs, nil
	}
	cred, err := c.src.ControllerCredentials(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if ok && cred.Server == e.server && bytes.Equal(cred.CA, e.cred.CA) && now.Before(e.notAfter.Add(-c.Renew)) {
		// Same endpoint and CAs, certificate still good: keep the pool. A
		// rotation changes the CAs, and the client follows within recheck.
		e.checked = now
		c.mu.Lock()
		c.tenants[tenant] = e
		c.mu.Unlock()
		return e.cs, nil
	}
	cs, err := kubernetes.NewForConfig(restConfig(cred, c.Timeout))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.tenants[tenant] = entry{cs: cs, cred: cred, server: cred.Server, notAfter: cred.NotAfter, checked: now}
	c.mu.Unlock()
	return cs, nil
}

// ServerVersionAt asks the API server of one control plane (its address,
// at the port of the tenant's endpoint) for its version: during an upgrade
// the endpoint may answer from another node.
func (c *Clients) ServerVersionAt(ctx context.Context, tenant, address string) (string, error) {
	if _, err := c.For(ctx, tenant); err != nil {
		return "", err
	}
	c.mu.Lock()
	cred := c.tenants[tenant].cred
	c.mu.Unlock()
	if cred == nil {
		return "", fmt.Errorf("no credentials for tenant %s", tenant)
	}
	u, err := url.Parse(cred.Server)
	if err != nil {
		return "", fmt.Errorf("the tenant's endpoint %q: %w", cred.Server, err)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	if h, _, err := net.SplitHostPort(address); err == nil {
		address = h
	}
	cfg := restConfig(cred, c.Timeout)
	cfg.Host = "https://" + net.JoinHostPort(address, port)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	raw, err := dc.RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	var info struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		return "", fmt.Errorf("the API server's /version: %w", err)
	}
	return info.GitVersion, nil
}

// Forget drops a tenant's client (the tenant was deleted).
func (c *Clients) Forget(tenant string) {
	c.mu.Lock()
	delete(c.tenants, tenant)
	delete(c.rbac, tenant)
	c.mu.Unlock()
}

func restConfig(cred *talos.ControllerCredentials, timeout time.Duration) *rest.Config {
	return &rest.Config{
		Host:    cred.Server,
		Timeout: timeout,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: cred.CA, CertData: cred.Cert, KeyData: cred.Key,
		},
		UserAgent: "rezuscloud-controller",
		QPS:       20, Burst: 40,
	}
}
