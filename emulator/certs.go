package emulator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
)

// maintenanceTLS is the TLS of a node without a config: a self-signed server
// certificate and no client certificate asked for, as Talos does (talosctl
// connects with --insecure).
func maintenanceTLS(ip net.IP) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &stdx509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "maintenance-service"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     stdx509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{ip},
	}
	der, err := stdx509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.NoClientCert,
	}, nil
}

// configuredTLS is apid's TLS: a server certificate for ip issued with the
// cluster's OS CA key (issuer: a control plane's machine.ca, which is how
// trustd serves workers, whose configs carry no key), and client certificates
// required and verified against the config's OS CA and accepted CAs, as
// Talos's apid trusts them (machine.ca plus machine.acceptedCAs).
func configuredTLS(cfg config.Provider, issuer *x509.PEMEncodedCertificateAndKey, ip net.IP) (*tls.Config, error) {
	issuing := cfg.Machine().Security().IssuingCA()
	if issuer == nil || len(issuer.Key) == 0 {
		return nil, errors.New("no control plane of this cluster holds the OS CA key to issue the apid certificate (trustd)")
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuer)
	if err != nil {
		return nil, fmt.Errorf("loading the OS CA: %w", err)
	}
	pair, err := x509.NewKeyPair(ca,
		x509.CommonName(ip.String()),
		x509.IPAddresses([]net.IP{ip}),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
		x509.NotAfter(time.Now().Add(365*24*time.Hour)),
	)
	if err != nil {
		return nil, fmt.Errorf("issuing the apid certificate: %w", err)
	}
	pool := stdx509.NewCertPool()
	if !pool.AppendCertsFromPEM(issuing.Crt) {
		return nil, errors.New("machine.ca certificate is not PEM")
	}
	for _, accepted := range cfg.Machine().Security().AcceptedCAs() {
		pool.AppendCertsFromPEM(accepted.Crt)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*pair.Certificate},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// apidCreds is the TLS a configured node's apid serves, issued again only
// when what it is made of changes.
type apidCreds struct {
	mu  sync.Mutex
	key string // apidKey of cfg
	cfg *tls.Config
}

// apidServerTLS is the TLS of a configured node's gRPC server: each
// handshake takes apidTLS, so a config applied in place (a CA rotation's
// stages) counts from the next connection on, as Talos's apid reloads its
// certificates without restarting.
func (n *node) apidServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			n.mu.Lock()
			cfg, cluster, ip := n.cfg, n.st.ClusterID, n.ip()
			n.mu.Unlock()
			return n.apidTLS(cfg, cluster, ip)
		},
	}
}

// apidTLS is apid's TLS for the node's config cfg: its certificate comes
// from the OS CA whose certificate is the config's machine.ca (osCA).
func (n *node) apidTLS(cfg config.Provider, cluster string, ip net.IP) (*tls.Config, error) {
	if cfg == nil {
		return nil, errors.New("the node has no config (reset)")
	}
	issuer := n.em.osCA(cluster, cfg.Machine().Security().IssuingCA().Crt)
	key := apidKey(cfg, issuer, ip)
	n.apid.mu.Lock()
	defer n.apid.mu.Unlock()
	if n.apid.cfg != nil && n.apid.key == key {
		return n.apid.cfg, nil
	}
	c, err := configuredTLS(cfg, issuer, ip)
	if err != nil {
		return nil, err
	}
	n.apid.key, n.apid.cfg = key, c
	return c, nil
}

// apidKey names what apid's TLS is made of: the address, the trusted CAs
// and the issuing one.
func apidKey(cfg config.Provider, issuer *x509.PEMEncodedCertificateAndKey, ip net.IP) string {
	h := sha256.New()
	h.Write(ip)
	h.Write([]byte{0})
	h.Write(cfg.Machine().Security().IssuingCA().Crt)
	for _, a := range cfg.Machine().Security().AcceptedCAs() {
		h.Write([]byte{0})
		h.Write(a.Crt)
	}
	if issuer != nil {
		h.Write([]byte{1})
		h.Write(issuer.Crt)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// osCAKey names an OS CA the emulator learnt from a control plane's
// machine.ca: by cluster and certificate (certID), and the cluster's latest
// under crt "".
type osCAKey struct{ cluster, crt string }

// learnOSCA remembers a control plane's OS CA with its key: trustd on that
// machine can issue with it, for as long as the emulator runs, so a worker
// whose config still names a CA the control planes have swapped out still
// gets its certificate from that CA.
func (e *Emulator) learnOSCA(cluster string, ca *x509.PEMEncodedCertificateAndKey) {
	e.osCAs.Store(osCAKey{cluster: cluster}, ca)
	e.osCAs.Store(osCAKey{cluster: cluster, crt: certID(ca.Crt)}, ca)
}

// osCA is the OS CA with key that issues apid's certificate to a node of
// the cluster whose machine.ca is crt: the control plane's whose machine.ca
// is that certificate (a worker's config carries no key), else the latest
// any control plane of the cluster showed; nil before any did.
func (e *Emulator) osCA(cluster string, crt []byte) *x509.PEMEncodedCertificateAndKey {
	if v, ok := e.osCAs.Load(osCAKey{cluster: cluster, crt: certID(crt)}); ok && len(crt) > 0 {
		return v.(*x509.PEMEncodedCertificateAndKey)
	}
	if v, ok := e.osCAs.Load(osCAKey{cluster: cluster}); ok {
		return v.(*x509.PEMEncodedCertificateAndKey)
	}
	return nil
}

// certID identifies a PEM certificate by its first block's DER, so two
// encodings of one certificate are the same CA.
func certID(crt []byte) string {
	if b, _ := pem.Decode(crt); b != nil {
		return string(b.Bytes)
	}
	return string(crt)
}

// adminKubeconfig renders a kubeconfig for the cluster in cfg with a client
// certificate in system:masters issued from the cluster's Kubernetes CA,
// trusting it and the accepted CAs, as Talos's admin kubeconfig does: in
// the middle of a rotation the API server may serve either.
func adminKubeconfig(cfg config.Provider) ([]byte, error) {
	issuing := cfg.Cluster().IssuingCA()
	if issuing == nil || len(issuing.Key) == 0 {
		return nil, errors.New("cluster.ca with a key is required")
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuing)
	if err != nil {
		return nil, fmt.Errorf("loading the Kubernetes CA: %w", err)
	}
	pair, err := x509.NewKeyPair(ca,
		x509.CommonName("admin"),
		x509.Organization("system:masters"),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
		x509.NotAfter(time.Now().Add(365*24*time.Hour)),
	)
	if err != nil {
		return nil, fmt.Errorf("issuing the admin certificate: %w", err)
	}
	name := cfg.Cluster().Name()
	b64 := func(b []byte) string { return base64Std(b) }
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: %[2]s
    certificate-authority-data: %[3]s
users:
- name: admin@%[1]s
  user:
    client-certificate-data: %[4]s
    client-key-data: %[5]s
contexts:
- name: admin@%[1]s
  context:
    cluster: %[1]s
    user: admin@%[1]s
current-context: admin@%[1]s
`, name, cfg.Cluster().Endpoint().String(), b64(kubeTrust(cfg)), b64(pair.CrtPEM), b64(pair.KeyPEM)), nil
}

// kubeTrust is the CA bundle a client of the cluster's API trusts, as Talos
// writes it for the kubelet and the admin kubeconfig: cluster.ca then
// cluster.acceptedCAs.
func kubeTrust(cfg config.Provider) []byte {
	var b []byte
	if ca := cfg.Cluster().IssuingCA(); ca != nil {
		b = append(b, ca.Crt...)
	}
	for _, a := range cfg.Cluster().AcceptedCAs() {
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		b = append(b, a.Crt...)
	}
	return b
}
