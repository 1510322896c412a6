//go:build e2e

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// apiLB stands for the load balancer in front of a cluster's control
// planes (or Talos's KubePrism): it sends a connection to a backend whose
// kube-apiserver answers /readyz, checked every 100 ms as a load
// balancer's health check does, so a restarting API server (listening
// before its caches are synced) gets no traffic.
type apiLB struct {
	logf func(string, ...any)
	// cert is the client certificate health checks present (the API
	// servers allow no anonymous request); the probe keeps it fresh.
	cert     atomic.Pointer[tls.Certificate]
	mu       sync.Mutex
	backends []string // host:port
	ready    map[string]bool
}

func startAPILB(ctx context.Context, backends []string, logf func(string, ...any)) *apiLB {
	lb := &apiLB{backends: backends, ready: map[string]bool{}, logf: logf}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, //nolint:gosec // a health check, as load balancers make them
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				if c := lb.cert.Load(); c != nil {
					return c, nil
				}
				return &tls.Certificate{}, nil
			}},
		DisableKeepAlives: true,
	}}
	check := func() {
		for _, b := range backends {
			ok := false
			if resp, err := hc.Get("https://" + b + "/readyz"); err == nil {
				ok = resp.StatusCode == http.StatusOK
				resp.Body.Close()
			}
			lb.mu.Lock()
			if lb.ready[b] != ok {
				lb.logf("load balancer: %s ready=%v at %s", b, ok, time.Now().Format(time.RFC3339Nano))
			}
			lb.ready[b] = ok
			lb.mu.Unlock()
		}
	}
	check()
	go func() {
		for ctx.Err() == nil {
			check()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return lb
}

// use makes health checks present the credential's certificate.
func (lb *apiLB) use(c *kubeCredential) error {
	pair, err := tls.X509KeyPair(c.cert, c.key)
	if err != nil {
		return err
	}
	lb.cert.Store(&pair)
	return nil
}

// allReady reports whether every backend passed its last health check.
func (lb *apiLB) allReady() bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, b := range lb.backends {
		if !lb.ready[b] {
			return false
		}
	}
	return true
}

// pick is the backends to try in order: the ready ones, else all.
func (lb *apiLB) pick() []string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var out []string
	for _, b := range lb.backends {
		if lb.ready[b] {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return lb.backends
	}
	return out
}

// kubeCredential is what a user's kubeconfig resolves to at one moment:
// the cluster's server and CA data from GET …/kubeconfig, and a client
// certificate from POST …/kubernetes/credential (what `rezusctl credential
// kubernetes` fetches at each use).
type kubeCredential struct {
	server        string
	ca, cert, key []byte
	lb            *apiLB
	// dialed is the backend of the last connection made.
	dialed atomic.Value
}

// freshCredential fetches a kubeCredential now; it does not fail the test
// (probes call it from their goroutine).
func freshCredential(p *proc, tenant string, lb *apiLB) (*kubeCredential, error) {
	req, err := http.NewRequest(http.MethodGet, p.url+"/api/v1/tenants/"+tenant+"/kubeconfig", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET kubeconfig: %d %s %v", resp.StatusCode, body, err)
	}
	kc, err := clientcmd.Load(body)
	if err != nil {
		return nil, err
	}
	var c kubeCredential
	for _, cl := range kc.Clusters {
		c.server, c.ca = cl.Server, cl.CertificateAuthorityData
	}
	code, cred := p.do(http.MethodPost, "/api/v1/tenants/"+tenant+"/kubernetes/credential", "")
	if code != http.StatusCreated && code != http.StatusOK {
		return nil, fmt.Errorf("POST kubernetes/credential: %d %v", code, cred)
	}
	st, _ := cred["status"].(map[string]any)
	crt, _ := st["clientCertificateData"].(string)
	key, _ := st["clientKeyData"].(string)
	c.cert, c.key, c.lb = []byte(crt), []byte(key), lb
	return &c, nil
}

// client is a clientset on the credential whose connections go through
// the load balancer to a ready control plane; it keeps no connection after
// close.
func (c *kubeCredential) client(timeout time.Duration) (kubernetes.Interface, func(), error) {
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	d := &net.Dialer{Timeout: 2 * time.Second}
	cfg := &rest.Config{Host: c.server, Timeout: timeout,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.ca, CertData: c.cert, KeyData: c.key},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var errs []error
			for _, a := range c.lb.pick() {
				conn, err := d.DialContext(ctx, network, a)
				if err == nil {
					c.dialed.Store(a)
					mu.Lock()
					conns = append(conns, conn)
					mu.Unlock()
					return conn, nil
				}
				errs = append(errs, err)
			}
			return nil, errors.Join(errs...)
		}}
	k, err := kubernetes.NewForConfig(cfg)
	return k, func() {
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range conns {
			conn.Close()
		}
	}, err
}

// rotateKubernetesCA rotates the tenant's Kubernetes CA through RezusCloud
// while a probe writes and reads a ConfigMap every 200 ms with a credential
// fetched afresh each time, and checks what a rotation promises: no probe
// fails; afterwards a break-glass kubeconfig and a per-user certificate
// from before are refused (401, even when the client trusts the new CA),
// new ones work, and every Node is Ready. It returns a break-glass client
// issued after the rotation.
// With one control plane there is no other API server while its own
// restarts: outage bounds the longest run of failed probes instead of 0.
func rotateKubernetesCA(t *testing.T, p *proc, tenant string, nodes int, version string, outage time.Duration) kubernetes.Interface {
	ctx := t.Context()
	var cps []string
	for _, m := range p.machines(tenant) {
		if m.Spec.Role == "controlplane" {
			cps = append(cps, m.Spec.Address)
		}
	}
	oldBreakGlass := p.raw("/api/v1/tenants/" + tenant + "/kubeconfig/admin")
	bg, err := clientcmd.Load(oldBreakGlass)
	require.NoError(t, err)
	server, err := url.Parse(bg.Clusters[bg.Contexts[bg.CurrentContext].Cluster].Server)
	require.NoError(t, err)
	var backends []string
	for _, cp := range cps {
		backends = append(backends, net.JoinHostPort(cp, server.Port()))
	}
	lb := startAPILB(ctx, backends, t.Logf)
	oldUser, err := freshCredential(p, tenant, lb)
	require.NoError(t, err)
	require.NoError(t, lb.use(oldUser))
	require.Eventually(t, lb.allReady,
		30*time.Second, 100*time.Millisecond, "the load balancer finds every API server ready")

	i := 0
	writes := startProbe(ctx, func(ctx context.Context) (int, error) {
		i++
		cred, err := freshCredential(p, tenant, lb)
		if err != nil {
			return 0, err
		}
		if err := lb.use(cred); err != nil {
			return 0, err
		}
		k, done, err := cred.client(5 * time.Second)
		if err != nil {
			return 0, err
		}
		defer done()
		cms := k.CoreV1().ConfigMaps("default")
		name := fmt.Sprintf("rotation-probe-%d", i)
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err == nil {
			_, err = cms.Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil && ctx.Err() == nil {
			t.Logf("probe %d at %s through %v failed: %v", i, time.Now().Format(time.RFC3339Nano), cred.dialed.Load(), err)
		}
		return 0, err
	})
	started := time.Now()
	code, body := p.do("POST", "/api/v1/tenants/"+tenant+"/upgrades", `{"metadata":{"name":"rotate-kubernetes-ca"},"spec":{"rotate":["kubernetes-ca"]}}`)
	require.Equal(t, http.StatusCreated, code, body)
	var run upgradeRun
	p.eventually(10*time.Minute, "the rotation finished", func() bool {
		for _, u := range p.upgrades(tenant) {
			if u.Metadata.Name == "rotate-kubernetes-ca" {
				run = u
			}
		}
		return run.Status.Phase == "Succeeded" || run.Status.Phase == "Failed"
	})
	took := time.Since(started)
	longest, _, runs, lastErr := writes.end()
	require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)
	require.Positive(t, runs)
	require.LessOrEqual(t, longest, outage, "the longest run of failed probes during the rotation (last error: %v)", lastErr)

	now, err := freshCredential(p, tenant, lb)
	require.NoError(t, err)
	k, done, err := now.client(10 * time.Second)
	require.NoError(t, err)
	t.Cleanup(done)
	requireNodesReady(t, k, nodes, version)

	// The credentials from before are refused by the API server itself:
	// given the new CA to trust, their certificates get 401.
	for name, old := range map[string]*kubeCredential{
		"break-glass": {server: now.server, ca: now.ca, lb: lb,
			cert: bg.AuthInfos[bg.Contexts[bg.CurrentContext].AuthInfo].ClientCertificateData,
			key:  bg.AuthInfos[bg.Contexts[bg.CurrentContext].AuthInfo].ClientKeyData},
		"per-user": {server: now.server, ca: now.ca, cert: oldUser.cert, key: oldUser.key, lb: lb},
	} {
		ok, close, err := old.client(10 * time.Second)
		require.NoError(t, err)
		_, err = ok.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		close()
		require.True(t, apierrors.IsUnauthorized(err), "the %s certificate from before the rotation is refused: %v", name, err)
	}
	// As given out before, with the old CA alone, they do not even trust the cluster.
	oldCfg, err := clientcmd.RESTConfigFromKubeConfig(oldBreakGlass)
	require.NoError(t, err)
	oldCfg.Timeout = 10 * time.Second
	oldK, err := kubernetes.NewForConfig(oldCfg)
	require.NoError(t, err)
	_, err = oldK.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "certificate", "the old kubeconfig's CA does not verify the API server")
	newBreakGlass, err := clientcmd.RESTConfigFromKubeConfig(p.raw("/api/v1/tenants/" + tenant + "/kubeconfig/admin"))
	require.NoError(t, err)
	require.False(t, strings.Contains(string(newBreakGlass.CAData), strings.TrimSpace(string(bg.Clusters[bg.Contexts[bg.CurrentContext].Cluster].CertificateAuthorityData))),
		"the new break-glass kubeconfig trusts the new CA only")
	_, err = kubernetes.NewForConfigOrDie(newBreakGlass).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err, "a break-glass kubeconfig issued now works")
	// talosctl health is the judge: Talos's own checks, through the node.
	tc := filepath.Join(t.TempDir(), "talosconfig")
	require.NoError(t, os.WriteFile(tc, p.raw("/api/v1/tenants/"+tenant+"/talosconfig"), 0o600))
	hctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(hctx, tofutest.Talosctl(t), "--talosconfig", tc, "--endpoints", cps[0], "--nodes", cps[0],
		"health", "--wait-timeout", "3m").CombinedOutput()
	require.NoError(t, err, "talosctl health after the rotation:\n%s", out)
	t.Logf("figures: Kubernetes CA rotation on %d control planes + %d workers in %s; %d probes, longest failure %s",
		len(cps), nodes-len(cps), took.Round(time.Second), runs, longest)
	// The tests after this one get a client as before (the endpoint, no
	// balancer: its health checks end with this test), on the new CA.
	return tenantKube(t, p, tenant)
}
