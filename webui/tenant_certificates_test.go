package webui

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// The overview lists each CA with its end and time left, marked expiring
// within 90 days and expired once it ended; without a bundle it says when
// they come.
func TestTenantOverviewShowsCertificates(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tn := domain.Tenant{Metadata: domain.ObjectMeta{Name: "acme"}, Spec: domain.TenantSpec{TalosVersion: "v1.13.0"}}
	var b strings.Builder
	require.NoError(t, tenantOverview(tn, now).Render(t.Context(), &b))
	require.Contains(t, b.String(), "Listed once the tenant's secrets bundle exists")

	tn.Status.Certificates = []domain.CertificateExpiry{
		{Name: "etcd-ca", NotAfter: now.Add(-3 * 24 * time.Hour)},
		{Name: "kubernetes-ca", NotAfter: now.Add(3650 * 24 * time.Hour)},
		{Name: "kubernetes-ca", Accepted: true, NotAfter: now.Add(61 * 24 * time.Hour)},
		{Name: "talos-ca", NotAfter: now.Add(90*24*time.Hour + time.Second)},
	}
	b.Reset()
	require.NoError(t, tenantOverview(tn, now).Render(t.Context(), &b))
	for _, want := range []string{
		`data-certificate="etcd-ca" data-certificate-state="expired"`, "ended 3d ago",
		`data-certificate="kubernetes-ca" data-certificate-state="valid"`, "in 3650d",
		`data-certificate="kubernetes-ca (accepted)" data-certificate-state="expiring"`, "in 61d",
		`data-certificate="talos-ca" data-certificate-state="valid"`, now.Add(90*24*time.Hour + time.Second).Format(time.RFC3339),
	} {
		require.Contains(t, b.String(), want)
	}
}

// The fleet counts the tenants with a CA ending within 30 days, ended ones
// included, each once.
func TestSummarizeFleetCountsCertificates(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	with := func(name string, ends ...time.Duration) domain.Tenant {
		tn := fleetTenant(name, "Ready", "v1.13.0", "v1.35.4", "True", 1, 1)
		for _, e := range ends {
			tn.Status.Certificates = append(tn.Status.Certificates, domain.CertificateExpiry{Name: "talos-ca", NotAfter: now.Add(e)})
		}
		return tn
	}
	ts := []domain.Tenant{
		with("none"),
		with("far", 3650*day, 31*day),
		with("edge", 30*day),
		with("two", 5*day, 10*day),
		with("ended", -day),
	}
	assert.Equal(t, 3, summarizeFleet(ts, nil, now).CertificatesEnding)
	assert.Equal(t, 4, summarizeFleet(ts, nil, now.Add(day)).CertificatesEnding, "a day on, far's second CA is within 30 days")
}

// The dashboard shows the count and the tenant page the list, from the
// status the PKI writes.
func TestCertificatesOnDashboardAndTenantPage(t *testing.T) {
	s := newUIStack(t)
	s.createTenant("alpha", nil)
	s.createTenant("beta", nil)
	b := s.signIn("victor", "view")
	require.Contains(t, b.get("/ui/").Body, `data-testid="fleet-certificates" data-count="0"`)

	soon := time.Now().Add(10 * 24 * time.Hour).UTC().Truncate(time.Second)
	w := eventstore.StatusWriter{Store: s.env.Store, Actor: domain.ActorPKI}
	res, err := eventstore.UpdateStatus(context.Background(), w, domain.TenantRef("alpha"), func(_ *domain.Object, st *domain.TenantStatus) (bool, error) {
		st.Certificates = []domain.CertificateExpiry{{Name: "kubernetes-ca", NotAfter: soon}}
		cond, _ := domain.CertificatesCondition(st.Certificates, time.Now())
		st.Conditions = domain.SetCondition(st.Conditions, cond, time.Now())
		return true, nil
	})
	require.NoError(t, err)
	require.NoError(t, s.cache.WaitFor(context.Background(), res.Seq))

	dash := b.get("/ui/")
	require.Equal(t, http.StatusOK, dash.Code)
	require.Contains(t, dash.Body, `data-testid="fleet-certificates" data-count="1"`)
	require.Contains(t, dash.Body, "1 tenant</span> with a CA ending within 30 days")

	page := b.get("/ui/tenants/alpha")
	require.Equal(t, http.StatusOK, page.Code)
	for _, want := range []string{`data-certificate="kubernetes-ca" data-certificate-state="expiring"`, soon.Format(time.RFC3339),
		`data-condition="CertificatesExpiring"`, "kubernetes-ca ends " + soon.Format(time.RFC3339)} {
		require.Contains(t, page.Body, want)
	}
}
