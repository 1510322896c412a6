package talos

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// PKIKeyPrefix starts the secrets-bucket key of every tenant's bundle.
const PKIKeyPrefix = "tenant-pki."

// PKIKey is the secrets-bucket key of a tenant's bundle.
func PKIKey(tenant string) string { return PKIKeyPrefix + tenant }

// SecretStore keeps sealed secrets; eventstore.SealedSecrets is the one used.
type SecretStore interface {
	Get(ctx context.Context, key string) ([]byte, error)
	// Create writes only when the key does not exist and reports whether it did.
	Create(ctx context.Context, key string, value []byte) (bool, error)
	// Put writes whether or not the key exists (a rotation's stages).
	Put(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	// Keys lists the keys starting with prefix (ending in a dot).
	Keys(ctx context.Context, prefix string) ([]string, error)
}

// PKIConfig configures the PKI. Cache and Secrets are required.
type PKIConfig struct {
	Cache   *projections.Cache
	Secrets SecretStore
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Now is the clock bundles and client certificates are issued at; default time.Now.
	Now func() time.Time
	// Interval bounds how often a pass runs while events arrive; default 200ms.
	Interval time.Duration
	// Store, when set, is where each tenant's CA ends are recorded in its
	// status (expiry.go); nil records nothing.
	Store *eventstore.Store
}

// PKI gives each tenant its one Talos secrets bundle (cluster, etcd,
// Kubernetes and OS CAs, tokens, encryption keys), kept sealed in the secrets
// bucket and never in an event. Every config and credential derives from it.
type PKI struct {
	cfg PKIConfig
	// gen shares one generation among the callers needing the same bundle;
	// slot bounds the generations under way to one.
	gen  singleflight.Group
	slot chan struct{}

	mu sync.Mutex
	// known are tenants whose bundle this replica has seen, so a pass only
	// touches the bucket for new or deleted tenants.
	known map[string]bool
	swept bool

	expiry expiryTracker

	// validated is, for each tenant, the SHA-256 of the stored JSON of
	// its bundle as last validated (validatedMu). Validation checks every
	// key, the RSA-4096 service-account key's the most: a perf recording of
	// a 1,000-tenant rollout had it at 4 % of the server, once for every
	// health probe and every run, of bundles that had not changed.
	validatedMu sync.Mutex
	validated   map[string][sha256.Size]byte
}

// NewPKI returns a PKI; Run keeps it in step with the tenants.
func NewPKI(cfg PKIConfig) *PKI {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interval == 0 {
		cfg.Interval = 200 * time.Millisecond
	}
	return &PKI{cfg: cfg, known: map[string]bool{}, slot: make(chan struct{}, 1)}
}

// Run makes a pass whenever the read model moves, until ctx ends: a tenant
// gets its bundle once it has a node group (the first thing that needs one;
// Bundle creates it on demand before that, for a credential download), and a
// bundle is removed once its tenant no longer exists. Generating a bundle
// costs RSA key generation (tens to hundreds of milliseconds of CPU), so
// tenants created without node groups cost nothing here. The tenant
// finalizer removes a tenant only after its objects are gone; when
// infrastructure teardown (tofu destroy) holds the tenant by a finalizer, the
// bundle therefore outlives the infrastructure.
func (p *PKI) Run(ctx context.Context) error {
	var seenTenants, seenGroups uint64
	passed := false
	for {
		// Only a tenant or a node group created or deleted changes what a pass does.
		if p.cfg.Cache.Ready() {
			mt, mg := p.cfg.Cache.Members(domain.TenantKind.Kind), p.cfg.Cache.Members(domain.NodeGroupKind.Kind)
			if !passed || mt != seenTenants || mg != seenGroups {
				if err := p.Pass(ctx); err != nil && ctx.Err() == nil {
					p.cfg.Log.Warn("pki pass", "err", err)
				} else {
					seenTenants, seenGroups, passed = mt, mg, true
				}
			}
			p.expiryDue(ctx)
		}
		t := time.NewTimer(p.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Pass ensures every tenant with a node group has a bundle and removes the
// bundles of tenants that are gone. It is safe to run twice and on several replicas at once. It
// decodes only the tenants this replica has not seen, so a pass over many
// tenants costs little more than reading their names.
func (p *PKI) Pass(ctx context.Context) error {
	names := p.cfg.Cache.Names(domain.TenantKind.Kind)
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	var errs []error
	p.mu.Lock()
	sweep := !p.swept
	for name := range p.known {
		if !present[name] {
			delete(p.known, name)
			p.forgetDecoded(name)
			sweep = true
		}
	}
	p.mu.Unlock()
	for _, name := range names {
		p.mu.Lock()
		ok := p.known[name]
		p.mu.Unlock()
		if ok || p.cfg.Cache.Count(domain.NodeGroupKind.Kind, name) == 0 {
			continue
		}
		t, found, err := projections.Get[domain.Tenant](p.cfg.Cache, domain.TenantRef(name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !found {
			continue // deleted since
		}
		_, err = p.ensure(ctx, t)
		if err == nil {
			err = p.RefreshExpiry(ctx, name)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.mu.Lock()
		p.known[name] = true
		p.mu.Unlock()
	}
	if sweep {
		if err := p.sweep(ctx); err != nil {
			errs = append(errs, err)
		} else {
			p.mu.Lock()
			p.swept = true
			p.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// sweep deletes the bundles (and rotations) of tenants that do not exist.
func (p *PKI) sweep(ctx context.Context) error {
	keys, err := p.cfg.Secrets.Keys(ctx, PKIKeyPrefix)
	if err != nil {
		return err
	}
	rotations, err := p.cfg.Secrets.Keys(ctx, RotationKeyPrefix)
	if err != nil {
		return err
	}
	keys = append(keys, rotations...)
	if len(keys) == 0 {
		return nil
	}
	// A tenant another replica just created may not be in this cache yet:
	// catch up with the stream before deciding a tenant is gone.
	if err := p.cfg.Cache.Sync(ctx); err != nil {
		return fmt.Errorf("syncing before removing bundles: %w", err)
	}
	for _, k := range keys {
		name := strings.TrimPrefix(strings.TrimPrefix(k, PKIKeyPrefix), RotationKeyPrefix)
		if _, ok := p.cfg.Cache.Get(domain.Ref{Kind: domain.TenantKind.Kind, Name: name}); ok {
			continue
		}
		p.forgetDecoded(name)
		if err := p.cfg.Secrets.Delete(ctx, k); err != nil {
			return fmt.Errorf("removing the pki of deleted tenant %s: %w", name, err)
		}
		p.cfg.Log.Info("removed pki of deleted tenant", "tenant", name)
	}
	return nil
}

// Bundle returns a tenant's secrets bundle, creating it when the tenant exists
// and has none yet. While a rotation is under way it is the material that
// issues at the rotation's stage (Rotation.Apply), its CA certificates
// followed by the accepted ones (WithTrust).
func (p *PKI) Bundle(ctx context.Context, tenant string) (*secrets.Bundle, error) {
	b, err := p.storedBundle(ctx, tenant)
	if err != nil {
		return nil, err
	}
	r, err := p.rotation(ctx, tenant)
	if err != nil || r == nil {
		return b, err
	}
	return WithTrust(r.Apply(b)), nil
}

// storedBundle is the bundle as stored, before any rotation under way.
func (p *PKI) storedBundle(ctx context.Context, tenant string) (*secrets.Bundle, error) {
	raw, err := p.cfg.Secrets.Get(ctx, PKIKey(tenant))
	if err == nil {
		return p.decode(tenant, raw)
	}
	if !errors.Is(err, eventstore.ErrSecretNotFound) {
		return nil, fmt.Errorf("loading the pki of tenant %s: %w", tenant, err)
	}
	t, err := getTyped[domain.Tenant](p.cfg.Cache, domain.TenantRef(tenant))
	if err != nil {
		return nil, err
	}
	return p.ensure(ctx, t)
}

// ensure loads or creates the tenant's bundle. Replicas racing here agree on
// the one that was stored first.
func (p *PKI) ensure(ctx context.Context, t *domain.Tenant) (*secrets.Bundle, error) {
	name := t.Metadata.Name
	if raw, err := p.cfg.Secrets.Get(ctx, PKIKey(name)); err == nil {
		return p.decode(name, raw)
	} else if !errors.Is(err, eventstore.ErrSecretNotFound) {
		return nil, fmt.Errorf("loading the pki of tenant %s: %w", name, err)
	}
	// Callers that need the same missing bundle (the pass, the config
	// controller, the apply worker) share one generation; each decodes its
	// own copy.
	raw, err, _ := p.gen.Do(name, func() (any, error) { return p.generate(ctx, t) })
	if err != nil {
		return nil, err
	}
	return p.decode(name, raw.([]byte))
}

// generate makes and stores a tenant's bundle and returns it as stored. At
// most one bundle is generated at a time on a replica: its RSA keys take a
// core for about a second, and a thousand tenants given node groups at once
// must not take the API's core as well.
func (p *PKI) generate(ctx context.Context, t *domain.Tenant) ([]byte, error) {
	name := t.Metadata.Name
	select {
	case p.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.slot }()
	key := PKIKey(name)
	// Stored meanwhile (another replica, or a flight that just ended)?
	if raw, err := p.cfg.Secrets.Get(ctx, key); err == nil {
		return raw, nil
	} else if !errors.Is(err, eventstore.ErrSecretNotFound) {
		return nil, fmt.Errorf("loading the pki of tenant %s: %w", name, err)
	}
	b, err := NewBundle(t.Spec.TalosVersion, p.cfg.Now())
	if err != nil {
		return nil, fmt.Errorf("generating the pki of tenant %s: %w", name, err)
	}
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	created, err := p.cfg.Secrets.Create(ctx, key, raw)
	if err != nil {
		return nil, fmt.Errorf("storing the pki of tenant %s: %w", name, err)
	}
	if !created {
		// Another replica stored its own first: that one is the tenant's.
		if raw, err = p.cfg.Secrets.Get(ctx, key); err != nil {
			return nil, fmt.Errorf("loading the pki of tenant %s: %w", name, err)
		}
		return raw, nil
	}
	p.cfg.Log.Info("generated pki", "tenant", name, "talosVersion", t.Spec.TalosVersion)
	return raw, nil
}

// decode decodes a tenant's stored bundle, a copy of its own for each
// caller; it validates the keys only of JSON it has not validated before.
func (p *PKI) decode(tenant string, raw []byte) (*secrets.Bundle, error) {
	sum := sha256.Sum256(raw)
	p.validatedMu.Lock()
	seen, ok := p.validated[tenant]
	p.validatedMu.Unlock()
	var (
		b   *secrets.Bundle
		err error
	)
	if ok && seen == sum {
		b = &secrets.Bundle{}
		err = json.Unmarshal(raw, b)
	} else {
		b, err = DecodeBundle(raw)
	}
	if err != nil {
		return nil, fmt.Errorf("decoding the pki of tenant %s: %w", tenant, err)
	}
	if !ok || seen != sum {
		p.validatedMu.Lock()
		if p.validated == nil {
			p.validated = map[string][sha256.Size]byte{}
		}
		p.validated[tenant] = sum
		p.validatedMu.Unlock()
	}
	b.Clock = clockFunc(p.cfg.Now)
	return b, nil
}

// forgetDecoded drops what decode noted of a tenant that is gone.
func (p *PKI) forgetDecoded(tenant string) {
	p.validatedMu.Lock()
	delete(p.validated, tenant)
	p.validatedMu.Unlock()
}

// NewBundle generates a secrets bundle for a Talos version's contract, issued at now.
func NewBundle(talosVersion string, now time.Time) (*secrets.Bundle, error) {
	contract, err := config.ParseContractFromVersion(talosVersion)
	if err != nil {
		return nil, fmt.Errorf("talos version %q: %w", talosVersion, err)
	}
	return secrets.NewBundle(secrets.NewFixedClock(now), contract)
}

// DecodeBundle reads a bundle stored as JSON; its clock is the system clock.
func DecodeBundle(raw []byte) (*secrets.Bundle, error) {
	b := &secrets.Bundle{}
	if err := json.Unmarshal(raw, b); err != nil {
		return nil, err
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	b.Clock = secrets.NewClock()
	return b, nil
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// getTyped reads one object from the read model into its typed view; a
// missing one is a NotFound, which the API answers as such.
func getTyped[T any](cache *projections.Cache, ref domain.Ref) (*T, error) {
	v, ok, err := projections.Get[T](cache, ref)
	if err == nil && !ok {
		err = domain.NewNotFound(ref.Kind, ref.Name)
	}
	return v, err
}
