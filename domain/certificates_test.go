package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// The condition turns True when a certificate enters the 90-day window and
// says Expired once one has ended, naming each with its end; its message
// changes only at those instants, which NextCertificatesCheck gives.
func TestCertificatesCondition(t *testing.T) {
	day := 24 * time.Hour
	k8sEnd := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	talosEnd := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	oldEnd := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	issuing := []domain.CertificateExpiry{
		{Name: domain.SecretKubernetesCA, NotAfter: k8sEnd},
		{Name: domain.SecretTalosCA, NotAfter: talosEnd},
	}
	rotating := append([]domain.CertificateExpiry{{Name: domain.SecretKubernetesCA, Accepted: true, NotAfter: oldEnd}}, issuing...)

	for _, tc := range []struct {
		name      string
		certs     []domain.CertificateExpiry
		now       time.Time
		none      bool
		status    string
		reason    string
		message   string
		nextCheck time.Time
	}{
		{name: "no bundle yet", none: true, now: k8sEnd},
		{name: "all far off", certs: issuing, now: k8sEnd.Add(-91 * day), status: "False", reason: domain.ReasonCertificatesValid,
			message: "nothing ends within 90 days; the first to end is kubernetes-ca, on 2027-03-01T12:00:00Z", nextCheck: k8sEnd.Add(-90 * day)},
		{name: "at the window's edge", certs: issuing, now: k8sEnd.Add(-90 * day), status: "True", reason: domain.ReasonCertificatesExpiring,
			message: "kubernetes-ca ends 2027-03-01T12:00:00Z", nextCheck: k8sEnd},
		{name: "a day before its end", certs: issuing, now: k8sEnd.Add(-day), status: "True", reason: domain.ReasonCertificatesExpiring,
			message: "kubernetes-ca ends 2027-03-01T12:00:00Z", nextCheck: k8sEnd},
		{name: "ended", certs: issuing, now: k8sEnd, status: "True", reason: domain.ReasonCertificatesExpired,
			message: "kubernetes-ca ended 2027-03-01T12:00:00Z", nextCheck: talosEnd.Add(-90 * day)},
		{name: "everything ended", certs: issuing, now: talosEnd.Add(day), status: "True", reason: domain.ReasonCertificatesExpired,
			message: "kubernetes-ca ended 2027-03-01T12:00:00Z; talos-ca ended 2030-01-01T00:00:00Z"},
		{name: "an accepted old CA ends first, earliest first", certs: rotating, now: oldEnd.Add(-10 * day), status: "True", reason: domain.ReasonCertificatesExpiring,
			message: "kubernetes-ca (accepted) ends 2027-01-01T00:00:00Z; kubernetes-ca ends 2027-03-01T12:00:00Z", nextCheck: oldEnd},
		{name: "an accepted one far off", certs: rotating, now: oldEnd.Add(-100 * day), status: "False", reason: domain.ReasonCertificatesValid,
			message: "nothing ends within 90 days; the first to end is kubernetes-ca (accepted), on 2027-01-01T00:00:00Z", nextCheck: oldEnd.Add(-90 * day)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := domain.CertificatesCondition(tc.certs, tc.now)
			require.Equal(t, !tc.none, ok)
			require.True(t, domain.NextCertificatesCheck(tc.certs, tc.now).Equal(tc.nextCheck), "next check %s", domain.NextCertificatesCheck(tc.certs, tc.now))
			if tc.none {
				return
			}
			require.Equal(t, domain.ConditionCertificatesExpiring, c.Type)
			require.Equal(t, [3]string{tc.status, tc.reason, tc.message}, [3]string{c.Status, c.Reason, c.Message})
			if next := domain.NextCertificatesCheck(tc.certs, tc.now); !next.IsZero() {
				// Nothing changes until the next check, and something does at it.
				before, _ := domain.CertificatesCondition(tc.certs, next.Add(-time.Second))
				require.Equal(t, c, before)
				at, _ := domain.CertificatesCondition(tc.certs, next)
				require.NotEqual(t, c, at)
			}
		})
	}
}

func TestSortCertificates(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	certs := []domain.CertificateExpiry{
		{Name: domain.SecretTalosCA, NotAfter: at},
		{Name: domain.SecretKubernetesCA, Accepted: true, NotAfter: at.Add(-time.Hour)},
		{Name: domain.SecretEtcdCA, NotAfter: at},
		{Name: domain.SecretKubernetesCA, NotAfter: at},
	}
	domain.SortCertificates(certs)
	var labels []string
	for _, c := range certs {
		labels = append(labels, c.Label())
	}
	require.Equal(t, []string{"etcd-ca", "kubernetes-ca", "kubernetes-ca (accepted)", "talos-ca"}, labels)
}

// A status stored before certificates were listed reads, and is written back
// without them; a listed one keeps them; a nameless one is refused.
func TestTenantStatusCertificates(t *testing.T) {
	old, causes := domain.TenantKind.NormalizeStatus([]byte(`{"phase":"Ready","machines":{"total":1,"ready":1,"controlPlane":1,"workers":0}}`))
	require.Empty(t, causes)
	require.NotContains(t, string(old), "certificates")

	listed, causes := domain.TenantKind.NormalizeStatus([]byte(`{"phase":"Ready","machines":{"total":0,"ready":0,"controlPlane":0,"workers":0},` +
		`"certificates":[{"name":"kubernetes-ca","notAfter":"2035-01-01T00:00:00Z"}]}`))
	require.Empty(t, causes)
	require.Contains(t, string(listed), `"certificates":[{"name":"kubernetes-ca","notAfter":"2035-01-01T00:00:00Z"}]`)

	_, causes = domain.TenantKind.NormalizeStatus([]byte(`{"machines":{"total":0,"ready":0,"controlPlane":0,"workers":0},"certificates":[{"notAfter":"2035-01-01T00:00:00Z"}]}`))
	require.Equal(t, []domain.Cause{{Field: "status.certificates[0].name", Type: domain.CauseRequired, Message: "name is required"}}, causes)
}
