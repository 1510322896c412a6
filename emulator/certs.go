package emulator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
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
// required and verified against the config's OS CA (and accepted CAs).
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

// adminKubeconfig renders a kubeconfig for the cluster in cfg with a client
// certificate in system:masters issued from the cluster's Kubernetes CA.
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
`, name, cfg.Cluster().Endpoint().String(), b64(issuing.Crt), b64(pair.CrtPEM), b64(pair.KeyPEM)), nil
}
