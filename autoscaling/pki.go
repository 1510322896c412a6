package autoscaling

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Secrets is the sealed secret store (eventstore.SealedSecrets): the CA's
// key and the record of every certificate issued live there, never in
// events and never plain at rest.
type Secrets interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
	Create(ctx context.Context, key string, value []byte) (bool, error)
	Delete(ctx context.Context, key string) error
	Keys(ctx context.Context, prefix string) ([]string, error)
}

// Secret keys: the CA, and one record per client certificate issued
// (revoking deletes it, and a certificate without its record is refused).
const (
	caKey        = "autoscaler.ca"
	issuedPrefix = "autoscaler.issued."
)

// clientOrg is the organisation of every client certificate; the tenant
// is the common name's part after "autoscaler:".
const (
	clientOrg      = "rezuscloud-autoscaler"
	clientCNPrefix = "autoscaler:"
)

// Validity bounds of a client certificate: short-lived where it can be,
// and the autoscaler's certificate is rotated by issuing a new one.
const (
	DefaultValidity = 30 * 24 * time.Hour
	MaxValidity     = 365 * 24 * time.Hour
)

// Issued is the record of one client certificate.
type Issued struct {
	Tenant   string    `json:"tenant"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"notAfter"`
	IssuedAt time.Time `json:"issuedAt"`
	IssuedBy string    `json:"issuedBy"`
}

// Credentials are what the autoscaler needs: its certificate and key, and
// the CA that signs the service's certificate.
type Credentials struct {
	Issued
	CertPEM, KeyPEM, CAPEM []byte
}

// PKI issues the autoscaler's client certificates per tenant and the
// service's own certificate, from a CA of this installation.
type PKI struct {
	secrets Secrets
	now     func() time.Time

	mu sync.Mutex
	ca *tls.Certificate
}

// NewPKI returns the PKI over the sealed secrets.
func NewPKI(secrets Secrets, now func() time.Time) *PKI {
	if now == nil {
		now = time.Now
	}
	return &PKI{secrets: secrets, now: now}
}

// authority returns the CA, creating it on first use (every replica
// creates at most one, and all read the first one written).
func (p *PKI) authority(ctx context.Context) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ca != nil {
		return p.ca, nil
	}
	raw, err := p.secrets.Get(ctx, caKey)
	if errors.Is(err, eventstore.ErrSecretNotFound) {
		fresh, gerr := newCA(p.now())
		if gerr != nil {
			return nil, gerr
		}
		if _, err = p.secrets.Create(ctx, caKey, fresh); err != nil {
			return nil, fmt.Errorf("storing the autoscaler CA: %w", err)
		}
		raw, err = p.secrets.Get(ctx, caKey)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the autoscaler CA: %w", err)
	}
	ca, err := parsePair(raw)
	if err != nil {
		return nil, fmt.Errorf("the autoscaler CA: %w", err)
	}
	p.ca = ca
	return ca, nil
}

// CAPEM is the CA certificate.
func (p *PKI) CAPEM(ctx context.Context) ([]byte, error) {
	ca, err := p.authority(ctx)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate[0]}), nil
}

// Issue makes a client certificate that can see and scale only tenant's
// autoscaled node groups, valid for validity (0: DefaultValidity).
func (p *PKI) Issue(ctx context.Context, tenant, actor string, validity time.Duration) (Credentials, error) {
	if causes := domain.ValidateName(tenant, "tenant"); len(causes) > 0 {
		return Credentials{}, domain.NewBadRequest("tenant: " + causes[0].Message)
	}
	if validity == 0 {
		validity = DefaultValidity
	}
	if validity < time.Hour || validity > MaxValidity {
		return Credentials{}, domain.NewBadRequest(fmt.Sprintf("validity must be between 1h and %s, got %s", MaxValidity, validity))
	}
	ca, err := p.authority(ctx)
	if err != nil {
		return Credentials{}, err
	}
	now := p.now().UTC().Truncate(time.Second)
	key, serial, err := newKey()
	if err != nil {
		return Credentials{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: clientCNPrefix + tenant, Organization: []string{clientOrg}},
		NotBefore:    now.Add(-time.Minute), NotAfter: now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return Credentials{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Credentials{}, err
	}
	rec := Issued{Tenant: tenant, Serial: serial.Text(16), NotAfter: tmpl.NotAfter, IssuedAt: now, IssuedBy: actor}
	raw, err := json.Marshal(rec)
	if err != nil {
		return Credentials{}, err
	}
	if err := p.secrets.Put(ctx, issuedKey(tenant, rec.Serial), raw); err != nil {
		return Credentials{}, fmt.Errorf("recording the certificate: %w", err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate[0]})
	return Credentials{Issued: rec, CAPEM: caPEM,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}, nil
}

func issuedKey(tenant, serial string) string { return issuedPrefix + tenant + "." + serial }

// List returns the tenant's certificates not revoked, oldest first.
func (p *PKI) List(ctx context.Context, tenant string) ([]Issued, error) {
	keys, err := p.secrets.Keys(ctx, issuedPrefix+tenant+".")
	if err != nil {
		return nil, err
	}
	out := []Issued{}
	for _, k := range keys {
		raw, err := p.secrets.Get(ctx, k)
		if errors.Is(err, eventstore.ErrSecretNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var rec Issued
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("reading %s: %w", k, err)
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b Issued) int { return a.IssuedAt.Compare(b.IssuedAt) })
	return out, nil
}

// Revoke revokes a certificate of the tenant: from then on every request
// made with it is refused.
func (p *PKI) Revoke(ctx context.Context, tenant, serial string) error {
	if _, err := p.secrets.Get(ctx, issuedKey(tenant, serial)); errors.Is(err, eventstore.ErrSecretNotFound) {
		return domain.NewNotFound("AutoscalerCertificate", serial)
	} else if err != nil {
		return err
	}
	return p.secrets.Delete(ctx, issuedKey(tenant, serial))
}

// tenantOf checks a verified client certificate against its record and
// returns its tenant.
func (p *PKI) tenantOf(ctx context.Context, leaf *x509.Certificate) (string, error) {
	tenant, ok := strings.CutPrefix(leaf.Subject.CommonName, clientCNPrefix)
	if !ok || !slices.Equal(leaf.Subject.Organization, []string{clientOrg}) || tenant == "" {
		return "", errors.New("not an autoscaler certificate of RezusCloud")
	}
	serial := leaf.SerialNumber.Text(16)
	if _, err := p.secrets.Get(ctx, issuedKey(tenant, serial)); err != nil {
		if errors.Is(err, eventstore.ErrSecretNotFound) {
			return "", fmt.Errorf("certificate %s of tenant %s is revoked", serial, tenant)
		}
		return "", err
	}
	return tenant, nil
}

// ServerTLS is the TLS config of the gRPC listener: a certificate for
// hosts signed by the CA (made at every start, in memory), and client
// certificates of the CA required.
func (p *PKI) ServerTLS(ctx context.Context, hosts []string) (*tls.Config, error) {
	ca, err := p.authority(ctx)
	if err != nil {
		return nil, err
	}
	key, serial, err := newKey()
	if err != nil {
		return nil, err
	}
	now := p.now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "rezuscloud-autoscaler-service"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(MaxValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12,
	}, nil
}

// newKey makes an ECDSA P-256 key and a random 127-bit serial.
func newKey() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	return key, serial, nil
}

// newCA makes the CA: ECDSA P-256, ten years; cert and key PEM together.
func newCA(now time.Time) ([]byte, error) {
	key, serial, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "RezusCloud autoscaler CA", Organization: []string{"rezuscloud"}},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...), nil
}

func parsePair(raw []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(raw, raw)
	if err != nil {
		return nil, err
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &pair, nil
}
