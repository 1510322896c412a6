package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// tlsFlags are the TLS choices of serve.
type tlsFlags struct {
	CertFile, KeyFile string
	SelfSigned        bool
}

func (f tlsFlags) enabled() bool { return f.SelfSigned || f.CertFile != "" || f.KeyFile != "" }

// serverTLS returns the TLS config to serve with, or nil for plain HTTP. With
// SelfSigned it uses <data-dir>/tls/{tls.crt,tls.key}, creating them on first
// start, so clients can pin the same certificate across restarts.
func serverTLS(dataDir string, f tlsFlags) (*tls.Config, string, error) {
	if !f.enabled() {
		return nil, "", nil
	}
	cert, key := f.CertFile, f.KeyFile
	if f.SelfSigned {
		if cert != "" || key != "" {
			return nil, "", errors.New("--tls-self-signed and --tls-cert/--tls-key are exclusive")
		}
		dir := filepath.Join(dataDir, "tls")
		cert, key = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		if _, err := os.Stat(cert); errors.Is(err, os.ErrNotExist) {
			if err := writeSelfSigned(dir, cert, key); err != nil {
				return nil, "", err
			}
		}
	} else if cert == "" || key == "" {
		return nil, "", errors.New("--tls-cert and --tls-key go together")
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, "", fmt.Errorf("loading the TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, cert, nil
}

// writeSelfSigned makes an ECDSA P-256 certificate for localhost, the loopback
// addresses and this host's name, valid for ten years.
func writeSelfSigned(dir, certFile, keyFile string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	names := []string{"localhost"}
	if host != "" && host != "localhost" {
		names = append(names, host)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "rezuscloud", Organization: []string{"RezusCloud self-signed"}},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		DNSNames:    names,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}
