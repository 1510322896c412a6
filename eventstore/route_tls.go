package eventstore

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Routes between replicas are mutual TLS under a CA derived from the shared
// secret: a route credential sent in the clear was captured by a fake peer
// on a down replica's route port, and a rogue server joining with it saw
// every event and audit record and could publish (issue 27). Now both ends
// of a route present a certificate the CA signed and verify the other's
// against it before anything else crosses; only holders of the secrets key
// have the CA's key, so only they join.
//
// The CA's Ed25519 key comes from the secret (HKDF) and its certificate from
// a fixed template, so every node builds the same CA without copying files;
// each node signs a certificate of its own at start for a key it makes then.

// routeCAEpoch fixes the CA certificate's validity, so that every node
// builds the same certificate.
var (
	routeCANotBefore = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	routeCANotAfter  = time.Date(2126, 1, 1, 0, 0, 0, 0, time.UTC)
)

// routeCertName is the name in every node's certificate. Route URLs are
// addresses, so names are not checked: the chain to the CA is.
const routeCertName = "rezuscloud-route"

// routeTLS builds a node's route TLS configuration from the cluster secret.
func routeTLS(secret []byte, node string) (*tls.Config, error) {
	seed, err := derive(secret, "route ca")
	if err != nil {
		return nil, err
	}
	caKey := ed25519.NewKeyFromSeed(seed)
	caPub := caKey.Public().(ed25519.PublicKey)
	ski := sha256.Sum256(caPub)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rezuscloud route CA"},
		NotBefore: routeCANotBefore, NotAfter: routeCANotAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign, SubjectKeyId: ski[:20],
	}
	// Ed25519 signatures are deterministic: the same CA certificate on every node.
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caPub, caKey)
	if err != nil {
		return nil, fmt.Errorf("route CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leafPub, leafKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: routeCertName, OrganizationalUnit: []string{node}},
		DNSNames:  []string{routeCertName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, ca, leafPub, caKey)
	if err != nil {
		return nil, fmt.Errorf("route certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the route peer presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fmt.Errorf("the route peer's certificate is not the cluster's: %w", err)
		}
		return nil
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}},
		// Accepting: a peer's certificate is required and verified
		// against the CA.
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  pool,
		// Dialing: the peer is an address, so its name is not checked
		// (InsecureSkipVerify); VerifyConnection checks its chain to the
		// CA instead, before the route sends its CONNECT.
		InsecureSkipVerify: true, //nolint:gosec // the chain is verified in VerifyConnection
		VerifyConnection:   verify,
	}, nil
}
