package kubecp

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
)

func TestPKIFromConfig(t *testing.T) {
	cp, worker := testConfigs(t, "https://kube.example.test:6443")

	pki, err := PKIFromConfig(cp)
	require.NoError(t, err)
	assert.Equal(t, cp.Cluster().IssuingCA().Crt, pki.KubeCA.Cert)
	assert.Equal(t, cp.Cluster().Etcd().CA().Key, pki.EtcdCA.Key)
	assert.Equal(t, cp.Cluster().AggregatorCA().Crt, pki.AggregatorCA.Cert)
	assert.Equal(t, cp.Cluster().ServiceAccount().Key, pki.ServiceAccountKey)

	// Talos generates an RSA service account key; the apiserver verifies
	// tokens with its PKIX public key.
	block, _ := pem.Decode(pki.ServiceAccountKey)
	require.NotNil(t, block)
	assert.Equal(t, "RSA PRIVATE KEY", block.Type)
	pub, err := serviceAccountPublicKey(pki.ServiceAccountKey)
	require.NoError(t, err)
	block, _ = pem.Decode(pub)
	require.NotNil(t, block)
	assert.Equal(t, "PUBLIC KEY", block.Type)
	_, err = x509.ParsePKIXPublicKey(block.Bytes)
	require.NoError(t, err)

	_, err = PKIFromConfig(worker)
	require.ErrorContains(t, err, "not a control-plane config")
}

func TestIssueClientKubeconfig(t *testing.T) {
	cp, _ := testConfigs(t, "https://kube.example.test:6443")
	pki, err := PKIFromConfig(cp)
	require.NoError(t, err)

	b, err := IssueClientKubeconfig(pki.KubeCA, nil, "https://127.0.0.9:6443", "system:node:w1", []string{"system:nodes"}, time.Hour)
	require.NoError(t, err)
	rc, err := clientcmd.RESTConfigFromKubeConfig(b)
	require.NoError(t, err)
	assert.Equal(t, "https://127.0.0.9:6443", rc.Host)
	assert.Equal(t, pki.KubeCA.Cert, rc.CAData)

	cert := parseCert(t, rc.CertData)
	assert.Equal(t, "system:node:w1", cert.Subject.CommonName)
	assert.Equal(t, []string{"system:nodes"}, cert.Subject.Organization)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert.ExtKeyUsage)
	assert.WithinDuration(t, time.Now().Add(time.Hour), cert.NotAfter, time.Minute)
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool(t, pki.KubeCA.Cert), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
}

// TestNodePKI checks the names of the certificates a node issues itself,
// which Talos gives them: what clients of the apiserver and etcd dial.
func TestNodePKI(t *testing.T) {
	cp, _ := testConfigs(t, "https://kube.example.test:6443")
	cfg := testConfig(t, cp, "cp-1", "127.0.33.7", Binaries{})
	cfg.setDefaults()
	// Another CA accepted, as while the Kubernetes CA rotates.
	cfg.PKI.AcceptedKubeCAs = cfg.PKI.AggregatorCA.Cert
	p, err := writeNodePKI(cfg)
	require.NoError(t, err)

	read := func(name string) *x509.Certificate {
		b, err := os.ReadFile(filepath.Join(cfg.DataDir, "pki", name))
		require.NoError(t, err)
		return parseCert(t, b)
	}
	kube, etcd := pool(t, cfg.PKI.KubeCA.Cert), pool(t, cfg.PKI.EtcdCA.Cert)

	api := read("apiserver.crt")
	for _, name := range []string{"127.0.33.7", "127.0.0.1", "10.96.0.1", "localhost", "kube.example.test",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
		_, err := api.Verify(x509.VerifyOptions{Roots: kube, DNSName: name})
		assert.NoError(t, err, "apiserver certificate for %s", name)
	}
	for _, name := range []string{"cp-1", "127.0.33.7", "127.0.0.1"} {
		for _, c := range []string{"etcd-server.crt", "etcd-peer.crt"} {
			_, err := read(c).Verify(x509.VerifyOptions{Roots: etcd, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			assert.NoError(t, err, "%s for %s", c, name)
		}
	}
	front := read("front-proxy-client.crt")
	assert.Equal(t, "front-proxy-client", front.Subject.CommonName)
	_, err = front.Verify(x509.VerifyOptions{Roots: pool(t, cfg.PKI.AggregatorCA.Cert), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	kubelet := read("apiserver-kubelet-client.crt")
	assert.Equal(t, []string{"system:masters"}, kubelet.Subject.Organization)

	rc, err := clientcmd.RESTConfigFromKubeConfig(p.admin)
	require.NoError(t, err)
	assert.Equal(t, "https://127.0.33.7:6443", rc.Host)
	admin := parseCert(t, rc.CertData)
	assert.Equal(t, "admin", admin.Subject.CommonName)
	assert.Equal(t, []string{"system:masters"}, admin.Subject.Organization)
	for file, cn := range map[string]string{"controller-manager.kubeconfig": "system:kube-controller-manager", "scheduler.kubeconfig": "system:kube-scheduler"} {
		rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(cfg.DataDir, "pki", file))
		require.NoError(t, err)
		assert.Equal(t, cn, parseCert(t, rc.CertData).Subject.CommonName)
		assert.Equal(t, cfg.PKI.KubeTrust(), rc.CAData, file)
	}

	// kube-apiserver's --client-ca-file takes cluster.ca and the accepted CAs.
	clientCAs, err := os.ReadFile(filepath.Join(cfg.DataDir, "pki", "kube-client-ca.crt"))
	require.NoError(t, err)
	for _, c := range []string{"apiserver-kubelet-client.crt", "front-proxy-client.crt"} {
		_, err = read(c).Verify(x509.VerifyOptions{Roots: pool(t, clientCAs), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		assert.NoError(t, err, "%s verified by the client CAs", c)
	}
}

func TestFirstServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{
		"10.96.0.0/12":  "10.96.0.1",
		"10.96.5.0/12":  "10.96.0.1",
		"fd00:10::/108": "fd00:10::1",
	} {
		ip, err := firstServiceIP(cidr)
		require.NoError(t, err, cidr)
		assert.True(t, ip.Equal(net.ParseIP(want)), "%s: %s", cidr, ip)
	}
	_, err := firstServiceIP("10.96.0.0")
	require.Error(t, err)
}

func parseCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	require.NotNil(t, block)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}

func pool(t *testing.T, pemCerts []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	require.True(t, p.AppendCertsFromPEM(pemCerts))
	return p
}
