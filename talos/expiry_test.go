package talos_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

// The PKI lists a tenant's CAs with their ends in its status once its
// bundle exists, turns CertificatesExpiring True as the clock enters the
// 90-day window, and follows a rotation: the new CA accepted, then issuing
// with the old one accepted, then alone.
func TestPKIRecordsCertificateExpiry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	env := eventstoretest.Start(t)
	cache := projections.NewCache(env.Store, nil)
	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	issued := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := &clock{now: issued}
	pki := talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: sealed, Store: env.Store, Now: clk.Now, Interval: 10 * time.Millisecond})
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{cache.Run, pki.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	_, err = env.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef("acme"),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "acme"}, Spec: []byte(`{}`)},
		Actor:  "test", Now: issued, NewUID: "uid-acme"}, eventstore.UpdateOptions{})
	require.NoError(t, err)
	env.Create(t, domain.NodeGroupKind, "acme", "cp", `{"role":"controlplane","count":1,"provider":"emu"}`)

	end := issued.Add(secrets.CAValidityTime).Truncate(time.Second)
	all := func(end time.Time) []domain.CertificateExpiry {
		return []domain.CertificateExpiry{{Name: "aggregator-ca", NotAfter: end}, {Name: "etcd-ca", NotAfter: end},
			{Name: "kubernetes-ca", NotAfter: end}, {Name: "talos-ca", NotAfter: end}}
	}
	// waitFor waits until the tenant's status lists want with the condition's
	// status and message.
	waitFor := func(want []domain.CertificateExpiry, status, message string) {
		t.Helper()
		var last domain.TenantStatus
		require.Eventually(t, func() bool {
			tn, ok, err := projections.Get[domain.Tenant](cache, domain.TenantRef("acme"))
			if err != nil || !ok {
				return false
			}
			last = tn.Status
			c := domain.FindCondition(last.Conditions, domain.ConditionCertificatesExpiring)
			return equalCerts(last.Certificates, want) && c != nil && c.Status == status && c.Message == message
		}, 10*time.Second, 10*time.Millisecond, "status: %+v", &last)
	}
	waitFor(all(end), "False", "nothing ends within 90 days; the first to end is aggregator-ca, on "+end.Format(time.RFC3339))

	// Time alone turns it: 89 days before the end the next tick judges it again.
	clk.Set(end.Add(-89 * 24 * time.Hour))
	e := end.Format(time.RFC3339)
	waitFor(all(end), "True", "aggregator-ca ends "+e+"; etcd-ca ends "+e+"; kubernetes-ca ends "+e+"; talos-ca ends "+e)

	// A rotation of the Kubernetes CA, stage by stage, as the saga calls it.
	rotatedAt := end.Add(-60 * 24 * time.Hour)
	clk.Set(rotatedAt)
	newEnd := rotatedAt.Add(secrets.CAValidityTime)
	_, err = pki.StartRotation(ctx, "acme", "rotate-1", []string{domain.SecretKubernetesCA})
	require.NoError(t, err)
	require.NoError(t, pki.RefreshExpiry(ctx, "acme"))
	accepting := append(all(end), domain.CertificateExpiry{Name: "kubernetes-ca", Accepted: true, NotAfter: newEnd})
	domain.SortCertificates(accepting)
	waitFor(accepting, "True", "aggregator-ca ends "+e+"; etcd-ca ends "+e+"; kubernetes-ca ends "+e+"; talos-ca ends "+e)

	require.NoError(t, pki.SetRotationStage(ctx, "acme", domain.RotationSwap))
	require.NoError(t, pki.RefreshExpiry(ctx, "acme"))
	swapped := all(end)
	swapped[2].NotAfter = newEnd
	swapped = append(swapped, domain.CertificateExpiry{Name: "kubernetes-ca", Accepted: true, NotAfter: end})
	domain.SortCertificates(swapped)
	waitFor(swapped, "True", "aggregator-ca ends "+e+"; etcd-ca ends "+e+"; kubernetes-ca (accepted) ends "+e+"; talos-ca ends "+e)

	require.NoError(t, pki.FinishRotation(ctx, "acme"))
	require.NoError(t, pki.RefreshExpiry(ctx, "acme"))
	done := all(end)
	done[2].NotAfter = newEnd
	waitFor(done, "True", "aggregator-ca ends "+e+"; etcd-ca ends "+e+"; talos-ca ends "+e)
}

func equalCerts(a, b []domain.CertificateExpiry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Accepted != b[i].Accepted || !a[i].NotAfter.Equal(b[i].NotAfter) {
			return false
		}
	}
	return true
}
