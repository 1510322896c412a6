// Package kubetest runs a real etcd and kube-apiserver for tests, from the
// binaries `go tool task tools` builds (hack/kube.sh) into the tools dir
// (internal/tofutest.ToolsDir, $REZUS_TOOLS_DIR or .tools):
//
//	etcd/<EtcdVersion>/etcd
//	kube/<KubeVersion>/kube-apiserver
//
// The apiserver authorizes as a cluster does (--authorization-mode=Node,RBAC,
// NodeRestriction admission), so a client from ClientFor("system:node:n",
// "system:nodes") is held to exactly what a kubelet may do. No controller
// manager or scheduler runs: a test binds pods with spec.nodeName and stands
// in for any controller it needs.
//
// Starting costs seconds (about fifteen on a loaded machine), so a test binary
// shares one Env:
//
//	func TestMain(m *testing.M) { kubetest.Main(m) }
//	func TestX(t *testing.T) { env := kubetest.Shared(t); … }
//
// A missing binary fails the test (never skips it): a test that did not run
// must not count as a pass. Only tests import this package.
package kubetest

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/internal/freeport"
	"github.com/rezuscloud/rezuscloud/internal/leaktest"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// Versions of the binaries an Env runs, as hack/kube.sh names their directories.
const (
	KubeVersion = "1.36.1"
	EtcdVersion = "3.6.16"
)

// startTimeout bounds how long etcd and the apiserver may take to become
// ready; generous, as tests run beside builds on small machines.
const startTimeout = 2 * time.Minute

const buildHint = "run `go tool task tools` (hack/kube.sh builds etcd and kube-apiserver into the tools dir)"

// Env is a running etcd and kube-apiserver.
type Env struct {
	// AdminConfig authenticates as a cluster admin (O=system:masters).
	AdminConfig *rest.Config
	// Version is the apiserver's git version, e.g. "v1.36.1".
	Version string

	host  string
	ca    *ca
	dir   string
	procs []*process // started order; stopped in reverse
}

// Binaries returns the paths of etcd and kube-apiserver in the tools dir, or
// an error naming what is missing and how to build it.
func Binaries() (etcd, apiserver string, err error) {
	dir, err := tofutest.ToolsDir()
	if err != nil {
		return "", "", err
	}
	etcd = filepath.Join(dir, "etcd", EtcdVersion, "etcd")
	apiserver = filepath.Join(dir, "kube", KubeVersion, "kube-apiserver")
	for _, bin := range []string{etcd, apiserver} {
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("no executable %s (set %s to another tools dir): %s", bin, tofutest.EnvToolsDir, buildHint)
		}
	}
	return etcd, apiserver, nil
}

// Start runs an Env for t alone, stopped when t ends. Prefer Shared.
func Start(t testing.TB) *Env {
	t.Helper()
	env, err := start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.stop)
	return env
}

var shared struct {
	main bool // Main runs the tests
	once sync.Once
	env  *Env
	err  error
}

// Main runs a test binary's tests, then stops the Env Shared started, and
// exits failing if a goroutine or a process outlived them (leaktest): call
// it from TestMain.
func Main(m *testing.M) {
	shared.main = true
	leaktest.VerifyTestMainAfter(m, func() {
		if shared.env != nil {
			shared.env.stop()
			_ = os.RemoveAll(shared.env.dir)
		}
	})
}

// Shared returns the test binary's one Env, started by the first test that
// asks. Tests sharing it must not depend on each other's objects: give each
// its own names (nodes, namespaces).
func Shared(t testing.TB) *Env {
	t.Helper()
	if !shared.main {
		t.Fatal("kubetest.Shared needs TestMain to call kubetest.Main(m), which stops the Env")
	}
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "kubetest-")
		if err != nil {
			shared.err = err
			return
		}
		shared.env, shared.err = start(dir)
		if shared.err != nil {
			_ = os.RemoveAll(dir)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.env
}

// ClientFor returns a config authenticating with a client certificate for
// user cn in groups orgs, e.g. ("system:node:w1", "system:nodes") for a
// kubelet.
func (e *Env) ClientFor(cn string, orgs ...string) *rest.Config {
	cert, key, err := e.ca.issue(pkix.Name{CommonName: cn, Organization: orgs}, nil, nil)
	if err != nil {
		panic(fmt.Sprintf("issuing a client certificate for %s: %v", cn, err)) // only a broken crypto/rand gets here
	}
	return &rest.Config{
		Host: e.host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: e.ca.certPEM, CertData: cert, KeyData: key,
		},
		// Tests make bursts of calls; client-side throttling would only slow them.
		QPS: 200, Burst: 400,
	}
}

func start(dir string) (*Env, error) {
	etcdBin, apiBin, err := Binaries()
	if err != nil {
		return nil, err
	}
	env := &Env{dir: dir}
	if err := env.start(etcdBin, apiBin); err != nil {
		env.stop()
		return nil, err
	}
	return env, nil
}

func (e *Env) start(etcdBin, apiBin string) error {
	ports, err := freeport.Loopback(3)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	etcdURL, err := e.startEtcd(ctx, etcdBin, ports[0], ports[1])
	if err != nil {
		return err
	}
	return e.startAPIServer(ctx, apiBin, etcdURL, ports[2])
}

func (e *Env) startEtcd(ctx context.Context, bin string, clientPort, peerPort int) (string, error) {
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	p, err := startProcess(e.dir, "etcd", bin,
		"--name=kubetest",
		"--data-dir="+filepath.Join(e.dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		// A test's data is thrown away: durability would only cost time.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return "", err
	}
	e.procs = append(e.procs, p)
	err = waitReady(ctx, p, http.DefaultClient, clientURL+"/health")
	return clientURL, err
}

func (e *Env) startAPIServer(ctx context.Context, bin, etcdURL string, port int) error {
	var err error
	if e.ca, err = newCA(); err != nil {
		return err
	}
	servingCert, servingKey, err := e.ca.issue(pkix.Name{CommonName: "kube-apiserver"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return err
	}
	saKey, saPub, err := newKeyPairPEM()
	if err != nil {
		return err
	}
	pki := filepath.Join(e.dir, "pki")
	files := map[string][]byte{"ca.crt": e.ca.certPEM, "apiserver.crt": servingCert, "apiserver.key": servingKey, "sa.key": saKey, "sa.pub": saPub}
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(pki, name), b, 0o600); err != nil {
			return err
		}
	}
	p, err := startProcess(e.dir, "kube-apiserver", bin,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--advertise-address=127.0.0.1",
		"--cert-dir="+filepath.Join(e.dir, "apiserver"),
		"--tls-cert-file="+filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file="+filepath.Join(pki, "apiserver.key"),
		"--client-ca-file="+filepath.Join(pki, "ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/12",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// The kubernetes Service's endpoints would be a loopback address,
		// which validation refuses: nothing in a test dials it.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, p)
	e.host = "https://127.0.0.1:" + strconv.Itoa(port)
	e.AdminConfig = e.ClientFor("kubetest-admin", "system:masters")
	hc, err := rest.HTTPClientFor(e.AdminConfig)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, p, hc, e.host+"/readyz"); err != nil {
		return err
	}
	return e.waitNamespaces(ctx, p)
}

// waitNamespaces waits for the namespaces the apiserver creates itself shortly
// after it is ready: a kubelet's Lease lives in kube-node-lease, mirror pods
// in kube-system.
func (e *Env) waitNamespaces(ctx context.Context, p *process) error {
	cs, err := kubernetes.NewForConfig(e.AdminConfig)
	if err != nil {
		return err
	}
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, "kube-node-lease"} {
		for {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err == nil {
				break
			}
			if err := pause(ctx, p); err != nil {
				return fmt.Errorf("waiting for namespace %s: %w", ns, err)
			}
		}
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	e.Version = v.GitVersion
	return nil
}

// waitReady polls url until it answers 200 OK.
func waitReady(ctx context.Context, p *process, hc *http.Client, url string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := pause(ctx, p); err != nil {
			return err
		}
	}
}

// pause waits a little before the next poll, failing with the child's output
// when it exited or ctx ended.
func pause(ctx context.Context, p *process) error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); its output ends:\n%s", p.name, p.cmd.ProcessState, p.tail())
	case <-ctx.Done():
		return fmt.Errorf("%s is not ready after %s; its output ends:\n%s", p.name, startTimeout, p.tail())
	case <-time.After(200 * time.Millisecond):
		return nil
	}
}

func (e *Env) stop() {
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].stop()
	}
	e.procs = nil
}
