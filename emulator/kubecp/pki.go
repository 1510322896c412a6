package kubecp

import (
	"crypto/ecdsa"
	"crypto/rsa"
	stdx509 "crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CertAndKey is a PEM certificate and its PEM private key.
type CertAndKey struct{ Cert, Key []byte }

// PKI is what a control plane issues its certificates from: the CAs of a
// Talos control-plane machine config, with their keys.
type PKI struct {
	// KubeCA is cluster.ca: it issues the apiserver's serving certificate
	// and every client certificate of the Kubernetes API, and the
	// controller manager signs CSRs with it.
	KubeCA CertAndKey
	// AcceptedKubeCAs is cluster.acceptedCAs, PEM certificates without
	// keys: kube-apiserver accepts client certificates they issued as it
	// does KubeCA's, which is how a rotation of the Kubernetes CA keeps the
	// old and new ones working while it runs.
	AcceptedKubeCAs []byte
	// EtcdCA is cluster.etcd.ca: etcd's server, peer and client certificates.
	EtcdCA CertAndKey
	// AggregatorCA is cluster.aggregatorCA: the front proxy's client certificate.
	AggregatorCA CertAndKey
	// ServiceAccountKey is cluster.serviceAccount.key, a PEM private key
	// (RSA since Talos 1.7's config contract, ECDSA before).
	ServiceAccountKey []byte
}

// PKIFromConfig reads the PKI of a control-plane machine config. A worker's
// config holds no CA keys, so it is an error.
func PKIFromConfig(cfg config.Config) (PKI, error) {
	c := cfg.Cluster()
	kube, err := caFrom("cluster.ca", c.IssuingCA())
	if err != nil {
		return PKI{}, err
	}
	var etcdCA *x509.PEMEncodedCertificateAndKey
	if e := c.Etcd(); e != nil {
		etcdCA = e.CA()
	}
	etcd, err := caFrom("cluster.etcd.ca", etcdCA)
	if err != nil {
		return PKI{}, err
	}
	agg, err := caFrom("cluster.aggregatorCA", c.AggregatorCA())
	if err != nil {
		return PKI{}, err
	}
	sa := c.ServiceAccount()
	if sa == nil || len(sa.Key) == 0 {
		return PKI{}, errors.New("reading the machine config's PKI: cluster.serviceAccount.key is empty (not a control-plane config?)")
	}
	if _, err := serviceAccountPublicKey(sa.Key); err != nil {
		return PKI{}, fmt.Errorf("reading the machine config's PKI: cluster.serviceAccount.key: %w", err)
	}
	var accepted []byte
	for _, a := range c.AcceptedCAs() {
		accepted = appendPEM(accepted, a.Crt)
	}
	return PKI{KubeCA: kube, AcceptedKubeCAs: accepted, EtcdCA: etcd, AggregatorCA: agg, ServiceAccountKey: sa.Key}, nil
}

// KubeTrust is KubeCA's certificate followed by the accepted CAs: what
// kube-apiserver's --client-ca-file holds (Talos's ca.crt) and what the
// kubeconfigs issued from this PKI trust, since in the middle of a rotation
// an API server may serve a certificate of either.
func (p PKI) KubeTrust() []byte {
	return appendPEM(slices.Clone(p.KubeCA.Cert), p.AcceptedKubeCAs)
}

// appendPEM appends PEM blocks, with a line break between them.
func appendPEM(b, more []byte) []byte {
	if len(b) > 0 && len(more) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	return append(b, more...)
}

func caFrom(field string, p *x509.PEMEncodedCertificateAndKey) (CertAndKey, error) {
	if p == nil || len(p.Crt) == 0 || len(p.Key) == 0 {
		return CertAndKey{}, fmt.Errorf("reading the machine config's PKI: %s has no certificate and key (not a control-plane config?)", field)
	}
	if _, err := x509.NewCertificateAuthorityFromCertificateAndKey(p); err != nil {
		return CertAndKey{}, fmt.Errorf("reading the machine config's PKI: %s: %w", field, err)
	}
	return CertAndKey{Cert: p.Crt, Key: p.Key}, nil
}

// serviceAccountPublicKey is the PKIX "PUBLIC KEY" PEM of a service account
// private key, which kube-apiserver's --service-account-key-file verifies
// tokens with. Only RSA and ECDSA keys sign service account tokens.
func serviceAccountPublicKey(keyPEM []byte) ([]byte, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case x509.PEMTypeRSAPrivate:
		key, err = stdx509.ParsePKCS1PrivateKey(block.Bytes)
	case x509.PEMTypeECPrivate:
		key, err = stdx509.ParseECPrivateKey(block.Bytes)
	case x509.PEMTypePrivate:
		key, err = stdx509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM block %q", block.Type)
	}
	if err != nil {
		return nil, err
	}
	var pub any
	switch k := key.(type) {
	case *rsa.PrivateKey:
		pub = &k.PublicKey
	case *ecdsa.PrivateKey:
		pub = &k.PublicKey
	default:
		return nil, fmt.Errorf("a %T cannot sign service account tokens (RSA or ECDSA only)", key)
	}
	der, err := stdx509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// certSpec is what one issued certificate says.
type certSpec struct {
	cn     string
	orgs   []string
	dns    []string
	ips    []net.IP
	server bool // also for TLS serving (client auth is always allowed)
	client bool
	ttl    time.Duration
}

// issue signs a fresh key's certificate with ca, as Talos issues its
// control plane's: the key is of the CA's kind (ECDSA P-256 from Talos's
// ECDSA CAs).
func issue(ca CertAndKey, s certSpec) (CertAndKey, error) {
	auth, err := x509.NewCertificateAuthorityFromCertificateAndKey(&x509.PEMEncodedCertificateAndKey{Crt: ca.Cert, Key: ca.Key})
	if err != nil {
		return CertAndKey{}, fmt.Errorf("loading the CA: %w", err)
	}
	var usage []stdx509.ExtKeyUsage
	if s.server {
		usage = append(usage, stdx509.ExtKeyUsageServerAuth)
	}
	if s.client {
		usage = append(usage, stdx509.ExtKeyUsageClientAuth)
	}
	now := time.Now()
	kp, err := x509.NewKeyPair(auth,
		x509.CommonName(s.cn),
		x509.Organization(s.orgs...),
		x509.DNSNames(s.dns),
		x509.IPAddresses(s.ips),
		// A minute back, so a certificate is valid at once for a process
		// whose clock reads it a hair earlier.
		x509.NotBefore(now.Add(-time.Minute)),
		x509.NotAfter(now.Add(s.ttl)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage(usage),
	)
	if err != nil {
		return CertAndKey{}, fmt.Errorf("issuing a certificate for %s: %w", s.cn, err)
	}
	return CertAndKey{Cert: kp.CrtPEM, Key: kp.KeyPEM}, nil
}

// IssueClientKubeconfig returns a kubeconfig for server (https://host:port)
// that trusts the CA bundle trust (kubeCA's certificate when nil) and
// authenticates as cn in groups orgs with a client certificate issued from
// kubeCA for ttl, the way Talos issues its admin kubeconfig and its
// components' ones.
func IssueClientKubeconfig(kubeCA CertAndKey, trust []byte, server, cn string, orgs []string, ttl time.Duration) ([]byte, error) {
	cert, err := issue(kubeCA, certSpec{cn: cn, orgs: orgs, client: true, ttl: ttl})
	if err != nil {
		return nil, err
	}
	if trust == nil {
		trust = kubeCA.Cert
	}
	return kubeconfig(trust, server, cn, cert)
}

func kubeconfig(caPEM []byte, server, user string, cert CertAndKey) ([]byte, error) {
	const cluster = "kubernetes"
	ctx := user + "@" + cluster
	kc := clientcmdapi.NewConfig()
	kc.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert.Cert, ClientKeyData: cert.Key}
	kc.Contexts[ctx] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user}
	kc.CurrentContext = ctx
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("writing a kubeconfig for %s: %w", user, err)
	}
	return b, nil
}
