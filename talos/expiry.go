package talos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// expiryRetry is how long a tenant whose expiry could not be written waits
// before the next try.
const expiryRetry = time.Minute

// CertificateExpiries lists the CAs of a tenant's bundle with their ends,
// and those its machines accept beside them during a rotation (acc, from
// PKI.Accepted) marked accepted, in status order (domain.SortCertificates).
// b may be a trust bundle (WithTrust): its first certificate is the one
// that issues. The service-account key has no end and is not listed. The
// break-glass kubeconfig's certificate (valid a year) is issued on each
// download and recorded nowhere, so it is not listed either.
func CertificateExpiries(b *secrets.Bundle, acc Accepted) ([]domain.CertificateExpiry, error) {
	var out []domain.CertificateExpiry
	add := func(name string, accepted bool, crt []byte) error {
		c, err := (&x509.PEMEncodedCertificate{Crt: crt}).GetCert()
		if err != nil {
			return fmt.Errorf("reading the %s: %w", name, err)
		}
		out = append(out, domain.CertificateExpiry{Name: name, Accepted: accepted, NotAfter: c.NotAfter.UTC()})
		return nil
	}
	for _, ca := range []struct {
		name string
		cert *x509.PEMEncodedCertificateAndKey
	}{
		{domain.SecretTalosCA, b.Certs.OS},
		{domain.SecretKubernetesCA, b.Certs.K8s},
		{domain.SecretAggregatorCA, b.Certs.K8sAggregator},
		{domain.SecretEtcdCA, b.Certs.Etcd},
	} {
		if ca.cert == nil || len(ca.cert.Crt) == 0 {
			continue
		}
		if err := add(ca.name, false, ca.cert.Crt); err != nil {
			return nil, err
		}
	}
	for _, a := range []struct {
		name  string
		certs []*x509.PEMEncodedCertificate
	}{{domain.SecretTalosCA, acc.OS}, {domain.SecretKubernetesCA, acc.Kubernetes}} {
		for _, c := range a.certs {
			if err := add(a.name, true, c.Crt); err != nil {
				return nil, err
			}
		}
	}
	domain.SortCertificates(out)
	return out, nil
}

// expiryStatusAfter is st with certs listed and the CertificatesExpiring
// condition judged as of now, and whether that changed it.
func expiryStatusAfter(st domain.TenantStatus, certs []domain.CertificateExpiry, now time.Time) (domain.TenantStatus, bool) {
	changed := !slices.EqualFunc(st.Certificates, certs, func(a, b domain.CertificateExpiry) bool {
		return a.Name == b.Name && a.Accepted == b.Accepted && a.NotAfter.Equal(b.NotAfter)
	})
	st.Certificates = certs
	cond, ok := domain.CertificatesCondition(certs, now)
	old := domain.FindCondition(st.Conditions, domain.ConditionCertificatesExpiring)
	switch {
	case !ok && old != nil:
		st.Conditions = slices.DeleteFunc(slices.Clone(st.Conditions), func(c domain.Condition) bool {
			return c.Type == domain.ConditionCertificatesExpiring
		})
		changed = true
	case ok && (old == nil || old.Status != cond.Status || old.Reason != cond.Reason || old.Message != cond.Message):
		st.Conditions = domain.SetCondition(slices.Clone(st.Conditions), cond, now)
		changed = true
	}
	return st, changed
}

// expiryTracker remembers when each tenant's CertificatesExpiring condition
// next changes with time alone, so that a pass re-judges a tenant only then.
type expiryTracker struct {
	mu  sync.Mutex
	due map[string]time.Time
	// next is the earliest of due (zero: nothing due).
	next time.Time
}

func (e *expiryTracker) set(tenant string, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.due == nil {
		e.due = map[string]time.Time{}
	}
	if at.IsZero() {
		delete(e.due, tenant)
	} else {
		e.due[tenant] = at
	}
	e.next = time.Time{}
	for _, t := range e.due {
		if e.next.IsZero() || t.Before(e.next) {
			e.next = t
		}
	}
}

// take removes and returns the tenants due at now; a clock read and a
// comparison until one is.
func (e *expiryTracker) take(now time.Time) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.next.IsZero() || now.Before(e.next) {
		return nil
	}
	var out []string
	e.next = time.Time{}
	for name, t := range e.due {
		if !now.Before(t) {
			out = append(out, name)
			delete(e.due, name)
		} else if e.next.IsZero() || t.Before(e.next) {
			e.next = t
		}
	}
	slices.Sort(out)
	return out
}

// RefreshExpiry reads a tenant's CAs again (the issuing ones, PKI.Bundle,
// and those accepted during a rotation, PKI.Accepted) and records their
// ends in the tenant's status when the read model shows others. A rotation
// calls it at each stage and at its end; the pass calls it once per tenant
// it has not seen (at start, for every tenant with node groups), and never
// again while the tenant lives, so the pass's cost per event stays that of
// reading the names. A tenant without a bundle, or gone, is left alone.
// Without a store (PKIConfig.Store) it does nothing.
func (p *PKI) RefreshExpiry(ctx context.Context, tenant string) error {
	if p.cfg.Store == nil {
		return nil
	}
	// Bundle would make a missing bundle: a tenant without one has no CAs yet.
	if _, err := p.cfg.Secrets.Get(ctx, PKIKey(tenant)); errors.Is(err, eventstore.ErrSecretNotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("loading the pki of tenant %s: %w", tenant, err)
	}
	b, err := p.Bundle(ctx, tenant)
	if err != nil {
		return err
	}
	acc, err := p.Accepted(ctx, tenant)
	if err != nil {
		return err
	}
	certs, err := CertificateExpiries(b, acc)
	if err != nil {
		return fmt.Errorf("reading the CAs of tenant %s: %w", tenant, err)
	}
	return p.writeExpiry(ctx, tenant, certs)
}

// expiryDue judges again the condition of the tenants whose next check has
// come, from the ends their status lists (no bundle is read). Run calls it
// on every tick.
func (p *PKI) expiryDue(ctx context.Context) {
	if p.cfg.Store == nil {
		return
	}
	for _, name := range p.expiry.take(p.cfg.Now()) {
		t, ok, err := projections.Get[domain.Tenant](p.cfg.Cache, domain.TenantRef(name))
		if err == nil && ok {
			err = p.writeExpiry(ctx, name, t.Status.Certificates)
		}
		if err != nil && ctx.Err() == nil {
			p.cfg.Log.Warn("pki: judging certificate expiry", "tenant", name, "err", err)
			p.expiry.set(name, p.cfg.Now().Add(expiryRetry))
		}
	}
}

// writeExpiry writes certs and the condition they make now, when the read
// model differs, and schedules the next judgement.
func (p *PKI) writeExpiry(ctx context.Context, tenant string, certs []domain.CertificateExpiry) error {
	now := p.cfg.Now()
	ref := domain.TenantRef(tenant)
	cur, ok, err := projections.Get[domain.Tenant](p.cfg.Cache, ref)
	if err != nil || !ok || cur.Metadata.DeletionTimestamp != nil {
		return err
	}
	if _, changed := expiryStatusAfter(cur.Status, certs, now); changed {
		w := eventstore.StatusWriter{Store: p.cfg.Store, Actor: domain.ActorPKI, Now: p.cfg.Now, Hint: p.cfg.Cache}
		_, err := eventstore.UpdateStatus(ctx, w, ref, func(obj *domain.Object, st *domain.TenantStatus) (changed bool, _ error) {
			if obj.Terminating() {
				return false, nil
			}
			*st, changed = expiryStatusAfter(*st, certs, now)
			return changed, nil
		})
		if err != nil && !domain.IsNotFound(err) {
			return fmt.Errorf("recording the certificates of tenant %s: %w", tenant, err)
		}
	}
	p.expiry.set(tenant, domain.NextCertificatesCheck(certs, now))
	return nil
}
