package talos

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// RotationKeyPrefix starts the secrets-bucket key of every tenant's rotation
// under way; it sits beside the bundle (PKIKey) and is sealed like it.
const RotationKeyPrefix = "tenant-pki-rotation."

// RotationKey is the secrets-bucket key of a tenant's rotation.
func RotationKey(tenant string) string { return RotationKeyPrefix + tenant }

// RotationRecordVersion is the version of the Rotation record written now.
const RotationRecordVersion = 1

// Rotation is a tenant's secret rotation under way: the new CAs, keys and
// tokens, generated once when it starts (so a saga resumed after a crash
// rolls out the same ones), the old CA certificates, and the stage the
// machines' configs are rendered for. While it exists, PKI.Bundle and
// PKI.Accepted apply it; FinishRotation folds it into the bundle.
type Rotation struct {
	Version int `json:"version"`
	// Upgrade names the run that started it.
	Upgrade string   `json:"upgrade"`
	Secrets []string `json:"secrets"`
	// Stage is one of domain.RotationAccept, RotationSwap, RotationDrop.
	Stage string `json:"stage"`
	// Next is what replaces the bundle's material at the swap.
	Next RotationNext `json:"next"`
	// Previous are the CA certificates issuing when it started, accepted
	// through the swap stage.
	Previous RotationPrevious `json:"previous"`
}

// RotationNext is the material a rotation brings in; nil or "" for what it
// does not rotate.
type RotationNext struct {
	OS             *x509.PEMEncodedCertificateAndKey `json:"os,omitempty"`
	Kubernetes     *x509.PEMEncodedCertificateAndKey `json:"kubernetes,omitempty"`
	Aggregator     *x509.PEMEncodedCertificateAndKey `json:"aggregator,omitempty"`
	BootstrapToken string                            `json:"bootstrapToken,omitempty"`
	TrustdToken    string                            `json:"trustdToken,omitempty"`
}

// RotationPrevious are the CA certificates (no keys) a rotation replaces.
type RotationPrevious struct {
	OS         []byte `json:"os,omitempty"`
	Kubernetes []byte `json:"kubernetes,omitempty"`
}

// Accepted are CA certificates machines accept beside the issuing ones
// (machine.acceptedCAs, cluster.acceptedCAs), and which RezusCloud's own
// clients and the credentials it hands out trust too.
type Accepted struct {
	OS         []*x509.PEMEncodedCertificate
	Kubernetes []*x509.PEMEncodedCertificate
}

// WithTrust is b with the accepted CAs appended to its OS and Kubernetes CA
// certificates, which then read as trust bundles: every Talos or Kubernetes
// client built from the bundle (credentials handed out, the controllers'
// own) trusts the machines whichever CA issued their certificate, while
// signing still uses the first certificate, the one matching the key.
// Render takes them apart again (SplitTrust).
func WithTrust(b *secrets.Bundle, acc Accepted) *secrets.Bundle {
	if len(acc.OS) == 0 && len(acc.Kubernetes) == 0 {
		return b
	}
	out := *b
	certs := *b.Certs
	out.Certs = &certs
	if len(acc.OS) > 0 {
		certs.OS = &x509.PEMEncodedCertificateAndKey{Crt: trust(b.Certs.OS.Crt, acc.OS), Key: b.Certs.OS.Key}
	}
	if len(acc.Kubernetes) > 0 {
		certs.K8s = &x509.PEMEncodedCertificateAndKey{Crt: trust(b.Certs.K8s.Crt, acc.Kubernetes), Key: b.Certs.K8s.Key}
	}
	return &out
}

// SplitTrust undoes WithTrust: the bundle with only the issuing CA
// certificates, and the accepted ones.
func SplitTrust(b *secrets.Bundle) (*secrets.Bundle, Accepted, error) {
	var acc Accepted
	if b == nil || b.Certs == nil || b.Certs.OS == nil || b.Certs.K8s == nil {
		return b, acc, nil
	}
	osIssuing, osAccepted, err := splitPEM(b.Certs.OS.Crt)
	if err != nil {
		return nil, acc, fmt.Errorf("the os ca: %w", err)
	}
	k8sIssuing, k8sAccepted, err := splitPEM(b.Certs.K8s.Crt)
	if err != nil {
		return nil, acc, fmt.Errorf("the kubernetes ca: %w", err)
	}
	if len(osAccepted) == 0 && len(k8sAccepted) == 0 {
		return b, acc, nil
	}
	out := *b
	certs := *b.Certs
	out.Certs = &certs
	certs.OS = &x509.PEMEncodedCertificateAndKey{Crt: osIssuing, Key: b.Certs.OS.Key}
	certs.K8s = &x509.PEMEncodedCertificateAndKey{Crt: k8sIssuing, Key: b.Certs.K8s.Key}
	acc.OS, acc.Kubernetes = osAccepted, k8sAccepted
	return &out, acc, nil
}

// splitPEM is the first PEM block of raw and the ones after it.
func splitPEM(raw []byte) ([]byte, []*x509.PEMEncodedCertificate, error) {
	var blocks [][]byte
	for rest := raw; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		blocks = append(blocks, pem.EncodeToMemory(blk))
	}
	if len(blocks) == 0 {
		return nil, nil, errors.New("no PEM certificate")
	}
	if len(blocks) == 1 {
		return raw, nil, nil
	}
	var acc []*x509.PEMEncodedCertificate
	for _, b := range blocks[1:] {
		acc = append(acc, &x509.PEMEncodedCertificate{Crt: b})
	}
	return blocks[0], acc, nil
}

func trust(issuing []byte, accepted []*x509.PEMEncodedCertificate) []byte {
	out := bytes.TrimRight(slices.Clone(issuing), "\n")
	out = append(out, '\n')
	for _, c := range accepted {
		if bytes.Equal(bytes.TrimSpace(c.Crt), bytes.TrimSpace(issuing)) {
			continue
		}
		out = append(out, bytes.TrimRight(c.Crt, "\n")...)
		out = append(out, '\n')
	}
	return out
}

// rotates reports whether the rotation takes secret.
func (r *Rotation) rotates(secret string) bool { return slices.Contains(r.Secrets, secret) }

// swapped reports whether the new material issues at the rotation's stage.
func (r *Rotation) swapped() bool {
	return r.Stage == domain.RotationSwap || r.Stage == domain.RotationDrop
}

// Apply is the bundle and the accepted CAs a tenant's configs and clients
// use at the rotation's stage: accept adds the new CAs as accepted; swap
// makes the new material issue and accepts the old CAs; drop accepts none.
// It is pure: b is copied, not changed.
func (r *Rotation) Apply(b *secrets.Bundle) (*secrets.Bundle, Accepted) {
	var acc Accepted
	out := *b
	certs := *b.Certs
	out.Certs = &certs
	sec := *b.Secrets
	out.Secrets = &sec
	trustd := *b.TrustdInfo
	out.TrustdInfo = &trustd
	switch r.Stage {
	case domain.RotationAccept:
		if r.Next.OS != nil {
			acc.OS = []*x509.PEMEncodedCertificate{{Crt: r.Next.OS.Crt}}
		}
		if r.Next.Kubernetes != nil {
			acc.Kubernetes = []*x509.PEMEncodedCertificate{{Crt: r.Next.Kubernetes.Crt}}
		}
		return &out, acc
	case domain.RotationSwap:
		if r.Next.OS != nil && len(r.Previous.OS) > 0 {
			acc.OS = []*x509.PEMEncodedCertificate{{Crt: r.Previous.OS}}
		}
		if r.Next.Kubernetes != nil && len(r.Previous.Kubernetes) > 0 {
			acc.Kubernetes = []*x509.PEMEncodedCertificate{{Crt: r.Previous.Kubernetes}}
		}
	}
	if r.swapped() {
		if r.Next.OS != nil {
			certs.OS = r.Next.OS
		}
		if r.Next.Kubernetes != nil {
			certs.K8s = r.Next.Kubernetes
		}
		if r.Next.Aggregator != nil {
			certs.K8sAggregator = r.Next.Aggregator
		}
		if r.Next.BootstrapToken != "" {
			sec.BootstrapToken = r.Next.BootstrapToken
		}
		if r.Next.TrustdToken != "" {
			trustd.Token = r.Next.TrustdToken
		}
	}
	return &out, acc
}

// newRotation draws the new material for secrets from a fresh bundle of the
// same Talos contract, so keys have the algorithms and lifetimes Talos gives.
func newRotation(b, fresh *secrets.Bundle, upgrade string, rotate []string) *Rotation {
	r := &Rotation{Version: RotationRecordVersion, Upgrade: upgrade, Secrets: slices.Clone(rotate), Stage: domain.RotationStages(rotate)[0]}
	if r.rotates(domain.SecretTalosCA) {
		r.Next.OS, r.Previous.OS = fresh.Certs.OS, b.Certs.OS.Crt
	}
	if r.rotates(domain.SecretKubernetesCA) {
		r.Next.Kubernetes, r.Previous.Kubernetes = fresh.Certs.K8s, b.Certs.K8s.Crt
	}
	if r.rotates(domain.SecretAggregatorCA) {
		r.Next.Aggregator = fresh.Certs.K8sAggregator
	}
	if r.rotates(domain.SecretBootstrapToken) {
		r.Next.BootstrapToken, r.Next.TrustdToken = fresh.Secrets.BootstrapToken, fresh.TrustdInfo.Token
	}
	return r
}

// DecodeRotation reads a stored rotation record of any version.
func DecodeRotation(raw []byte) (*Rotation, error) {
	var r Rotation
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	switch r.Version {
	case RotationRecordVersion:
	default:
		return nil, fmt.Errorf("rotation record version %d is newer than this release reads (%d)", r.Version, RotationRecordVersion)
	}
	if !slices.Contains([]string{domain.RotationAccept, domain.RotationSwap, domain.RotationDrop}, r.Stage) {
		return nil, fmt.Errorf("rotation record has an unknown stage %q", r.Stage)
	}
	return &r, nil
}

// rotation loads a tenant's rotation under way; nil when there is none.
func (p *PKI) rotation(ctx context.Context, tenant string) (*Rotation, error) {
	raw, err := p.cfg.Secrets.Get(ctx, RotationKey(tenant))
	if errors.Is(err, eventstore.ErrSecretNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("loading the rotation of tenant %s: %w", tenant, err)
	}
	r, err := DecodeRotation(raw)
	if err != nil {
		return nil, fmt.Errorf("decoding the rotation of tenant %s: %w", tenant, err)
	}
	return r, nil
}

// Rotation is the tenant's rotation under way, nil when there is none.
func (p *PKI) Rotation(ctx context.Context, tenant string) (*Rotation, error) {
	return p.rotation(ctx, tenant)
}

// Accepted are the CAs the tenant's machines accept beside the issuing
// ones: none unless a rotation is under way.
func (p *PKI) Accepted(ctx context.Context, tenant string) (Accepted, error) {
	r, err := p.rotation(ctx, tenant)
	if err != nil || r == nil {
		return Accepted{}, err
	}
	b, err := p.storedBundle(ctx, tenant)
	if err != nil {
		return Accepted{}, err
	}
	_, acc := r.Apply(b)
	return acc, nil
}

// StartRotation begins rotating secrets for the run upgrade, or returns the
// rotation already under way when it rotates the same secrets (a run that
// failed part-way is taken up where it stopped: every stage keeps all
// machines trusting each other). One with other secrets is a Conflict.
func (p *PKI) StartRotation(ctx context.Context, tenant, upgrade string, rotate []string) (*Rotation, error) {
	if r, err := p.rotation(ctx, tenant); err != nil || r != nil {
		if r != nil && !slices.Equal(r.Secrets, rotate) {
			return nil, domain.NewConflict(domain.UpgradeKind.Kind, upgrade, fmt.Sprintf(
				"a rotation of %v started by upgrade %s is at stage %s: rotate the same secrets to finish it first", r.Secrets, r.Upgrade, r.Stage))
		}
		return r, err
	}
	b, err := p.storedBundle(ctx, tenant)
	if err != nil {
		return nil, err
	}
	t, err := getTyped[domain.Tenant](p.cfg.Cache, domain.TenantRef(tenant))
	if err != nil {
		return nil, err
	}
	fresh, err := NewBundle(t.Spec.TalosVersion, p.cfg.Now())
	if err != nil {
		return nil, fmt.Errorf("generating the new secrets of tenant %s: %w", tenant, err)
	}
	r := newRotation(b, fresh, upgrade, rotate)
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if created, err := p.cfg.Secrets.Create(ctx, RotationKey(tenant), raw); err != nil {
		return nil, fmt.Errorf("storing the rotation of tenant %s: %w", tenant, err)
	} else if !created {
		return p.StartRotation(ctx, tenant, upgrade, rotate) // another writer's won
	}
	p.cfg.Log.Info("rotation started", "tenant", tenant, "upgrade", upgrade, "secrets", rotate)
	p.refreshExpiry(ctx, tenant)
	return r, nil
}

// SetRotationStage moves the tenant's rotation to stage; the configs
// rendered from then on carry it.
func (p *PKI) SetRotationStage(ctx context.Context, tenant, stage string) error {
	r, err := p.rotation(ctx, tenant)
	if err != nil {
		return err
	}
	if r == nil {
		return domain.NewNotFound("rotation", tenant)
	}
	if r.Stage == stage {
		return nil
	}
	r.Stage = stage
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := p.cfg.Secrets.Put(ctx, RotationKey(tenant), raw); err != nil {
		return fmt.Errorf("storing the rotation of tenant %s: %w", tenant, err)
	}
	p.refreshExpiry(ctx, tenant)
	return nil
}

// FinishRotation folds the tenant's rotation into its bundle (the new
// material issues, nothing else is accepted) and removes it. Safe to run
// twice: after a crash between the two writes the record is applied to a
// bundle that already holds the new material, which changes nothing.
func (p *PKI) FinishRotation(ctx context.Context, tenant string) error {
	r, err := p.rotation(ctx, tenant)
	if err != nil || r == nil {
		return err
	}
	b, err := p.storedBundle(ctx, tenant)
	if err != nil {
		return err
	}
	done := *r
	done.Stage = domain.RotationDrop
	nb, _ := done.Apply(b)
	raw, err := json.Marshal(nb)
	if err != nil {
		return err
	}
	if err := p.cfg.Secrets.Put(ctx, PKIKey(tenant), raw); err != nil {
		return fmt.Errorf("storing the rotated pki of tenant %s: %w", tenant, err)
	}
	if err := p.cfg.Secrets.Delete(ctx, RotationKey(tenant)); err != nil {
		return fmt.Errorf("removing the finished rotation of tenant %s: %w", tenant, err)
	}
	p.cfg.Log.Info("rotation finished", "tenant", tenant, "secrets", r.Secrets)
	p.refreshExpiry(ctx, tenant)
	return nil
}

// refreshExpiry records the tenant's CAs and their ends after a rotation
// moved them; a failure is logged, not the rotation's (the next pass or
// start records them).
func (p *PKI) refreshExpiry(ctx context.Context, tenant string) {
	if err := p.RefreshExpiry(ctx, tenant); err != nil && ctx.Err() == nil {
		p.cfg.Log.Warn("recording the certificates' ends after a rotation stage", "tenant", tenant, "err", err)
	}
}
