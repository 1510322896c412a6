package handlers_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// /metrics gives the end of each CA a tenant's status lists, one series per
// name and role, read from the read model; a tenant without any has none.
func TestMetricsCertificateExpiry(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.mustCreate("/api/v1/tenants", tenantBody("bare", nil))
	end := time.Date(2036, 5, 1, 12, 0, 0, 0, time.UTC)
	old := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	w := eventstore.StatusWriter{Store: s.env.Store, Actor: domain.ActorPKI}
	res, err := eventstore.UpdateStatus(context.Background(), w, domain.TenantRef("acme"), func(_ *domain.Object, st *domain.TenantStatus) (bool, error) {
		st.Certificates = []domain.CertificateExpiry{{Name: "kubernetes-ca", NotAfter: end},
			{Name: "kubernetes-ca", Accepted: true, NotAfter: old}, {Name: "talos-ca", NotAfter: end}}
		return true, nil
	})
	require.NoError(t, err)
	require.NoError(t, s.cache.WaitFor(context.Background(), res.Seq))

	m := s.do(http.MethodGet, "/metrics", nil)
	require.Equal(t, http.StatusOK, m.Code)
	for _, series := range []string{
		`rezus_tenant_certificate_expiry_timestamp_seconds{accepted="false",name="kubernetes-ca",tenant="acme"} 2.093256e+09`,
		`rezus_tenant_certificate_expiry_timestamp_seconds{accepted="true",name="kubernetes-ca",tenant="acme"} 1.7987616e+09`,
		`rezus_tenant_certificate_expiry_timestamp_seconds{accepted="false",name="talos-ca",tenant="acme"} 2.093256e+09`,
	} {
		require.Contains(t, string(m.Body), series)
	}
	require.NotContains(t, string(m.Body), `tenant="bare"`)
}
