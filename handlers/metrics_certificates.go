package handlers

import (
	"encoding/json"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// certificateExpiryDesc is the end of each tenant's CAs, as the PKI records
// them in status.certificates (accepted="true" for a CA kept accepted
// during a rotation). Alert on `… - time() < 90 * 86400`, the window of
// the tenants' CertificatesExpiring condition.
var certificateExpiryDesc = prometheus.NewDesc("rezus_tenant_certificate_expiry_timestamp_seconds",
	"When each of a tenant's CAs ends (Unix seconds), from status.certificates; accepted=\"true\" for a CA accepted beside the issuing one during a rotation.",
	[]string{"tenant", "name", "accepted"}, nil)

// certificateCollector reads the ends from the read model at each scrape,
// so every replica answers the same without keeping series of its own.
type certificateCollector struct {
	cache *projections.Cache
}

func (c certificateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certificateExpiryDesc }

func (c certificateCollector) Collect(ch chan<- prometheus.Metric) {
	res, err := c.cache.List(domain.TenantKind.Kind, projections.ListOptions{})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(certificateExpiryDesc, err)
		return
	}
	for _, raw := range res.Items {
		// Only the name and the certificates: a scrape decodes no more of a tenant.
		var t struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Status struct {
				Certificates []domain.CertificateExpiry `json:"certificates"`
			} `json:"status"`
		}
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		seen := map[[2]string]bool{}
		for _, cert := range t.Status.Certificates {
			key := [2]string{cert.Name, strconv.FormatBool(cert.Accepted)}
			if seen[key] {
				continue // two accepted of a name: one series, the first (earliest) listed
			}
			seen[key] = true
			ch <- prometheus.MustNewConstMetric(certificateExpiryDesc, prometheus.GaugeValue,
				float64(cert.NotAfter.Unix()), t.Metadata.Name, key[0], key[1])
		}
	}
}
