//go:build e2e

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeCredential is what a user's kubeconfig resolves to at one moment:
// the cluster's server and CA data from GET …/kubeconfig, and a client
// certificate from POST …/kubernetes/credential (what `rezusctl credential
// kubernetes` fetches at each use).
type kubeCredential struct {
	server          string
	ca, cert, key   []byte
	controlPlaneIPs []string
}

// freshCredential fetches a kubeCredential now; it does not fail the test
// (probes call it from their goroutine).
func freshCredential(p *proc, tenant string, cps []string) (*kubeCredential, error) {
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
	if code != http.StatusOK {
		return nil, fmt.Errorf("POST kubernetes/credential: %d %v", code, cred)
	}
	st, _ := cred["status"].(map[string]any)
	crt, _ := st["clientCertificateData"].(string)
	key, _ := st["clientKeyData"].(string)
	c.cert, c.key, c.controlPlaneIPs = []byte(crt), []byte(key), cps
	return &c, nil
}

// client is a clientset on the credential whose connections go, like a
// load balancer's in front of the control planes, to the endpoint while it
// accepts them and else to another control plane; it keeps no connection
// after close.
func (c *kubeCredential) client(timeout time.Duration) (kubernetes.Interface, func(), error) {
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	d := &net.Dialer{Timeout: 2 * time.Second}
	cfg := &rest.Config{Host: c.server, Timeout: timeout,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.ca, CertData: c.cert, KeyData: c.key},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var errs []error
			for _, a := range append([]string{addr}, hostsAt(c.controlPlaneIPs, port)...) {
				conn, err := d.DialContext(ctx, network, a)
				if err == nil {
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

func hostsAt(ips []string, port string) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip, port))
	}
	return out
}

// rotateKubernetesCA rotates the tenant's Kubernetes CA through RezusCloud
// while a probe writes and reads a ConfigMap every 200 ms with a credential
// fetched afresh each time, and checks what a rotation promises: no probe
// fails; afterwards a break-glass kubeconfig and a per-user certificate
// from before are refused (401, even when the client trusts the new CA),
// new ones work, and every Node is Ready. It returns a client on the new CA.
func rotateKubernetesCA(t *testing.T, p *proc, tenant string, nodes int, version string) kubernetes.Interface {
	ctx := t.Context()
	var cps []string
	for _, m := range p.machines(tenant) {
		if m.Spec.Role == "controlplane" {
			cps = append(cps, m.Spec.Address)
		}
	}
	oldBreakGlass := p.raw("/api/v1/tenants/" + tenant + "/kubeconfig/admin")
	oldUser, err := freshCredential(p, tenant, cps)
	require.NoError(t, err)

	i := 0
	writes := startProbe(ctx, func(ctx context.Context) (int, error) {
		i++
		cred, err := freshCredential(p, tenant, cps)
		if err != nil {
			return 0, err
		}
		k, done, err := cred.client(5 * time.Second)
		if err != nil {
			return 0, err
		}
		defer done()
		cms := k.CoreV1().ConfigMaps("default")
		name := fmt.Sprintf("rotation-probe-%d", i)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return 0, fmt.Errorf("probe %d: %w", i, err)
		}
		_, err = cms.Get(ctx, name, metav1.GetOptions{})
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
	require.Zero(t, longest, "no probe failed during the rotation (last error: %v)", lastErr)

	now, err := freshCredential(p, tenant, cps)
	require.NoError(t, err)
	k, done, err := now.client(10 * time.Second)
	require.NoError(t, err)
	t.Cleanup(done)
	requireNodesReady(t, k, nodes, version)

	// The credentials from before are refused by the API server itself:
	// given the new CA to trust, their certificates get 401.
	bg, err := clientcmd.Load(oldBreakGlass)
	require.NoError(t, err)
	for name, old := range map[string]*kubeCredential{
		"break-glass": {server: now.server, ca: now.ca, controlPlaneIPs: cps,
			cert: bg.AuthInfos[bg.Contexts[bg.CurrentContext].AuthInfo].ClientCertificateData,
			key:  bg.AuthInfos[bg.Contexts[bg.CurrentContext].AuthInfo].ClientKeyData},
		"per-user": {server: now.server, ca: now.ca, cert: oldUser.cert, key: oldUser.key, controlPlaneIPs: cps},
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
	t.Logf("figures: Kubernetes CA rotation on %d control planes + %d workers in %s; %d probes, longest failure %s",
		len(cps), nodes-len(cps), took.Round(time.Second), runs, longest)
	return k
}
