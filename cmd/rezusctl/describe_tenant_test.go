package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// describe tenant lists the CAs in a table of their own (not in the status
// block): each end, the time left by the reader's clock, and a mark on those
// within the CertificatesExpiring window or ended.
func TestDescribeTenantCertificates(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/tenants/acme", obj("Tenant", "", "acme", tcNow, `{"talosVersion":"v1.13.0"}`,
		`{"phase":"Ready","machines":{"total":1,"ready":1,"controlPlane":1,"workers":0},"certificates":[`+
			`{"name":"etcd-ca","notAfter":"2026-04-01T00:00:00Z"},`+
			`{"name":"kubernetes-ca","notAfter":"2036-05-01T12:00:00Z"},`+
			`{"name":"kubernetes-ca","accepted":true,"notAfter":"2026-07-01T12:00:00Z"},`+
			`{"name":"talos-ca","notAfter":"2026-09-01T12:00:00Z"}],`+
			`"conditions":[{"type":"CertificatesExpiring","status":"True","reason":"Expired","message":"etcd-ca ended 2026-04-01T00:00:00Z; kubernetes-ca (accepted) ends 2026-07-01T12:00:00Z","lastTransitionTime":"2026-04-01T00:00:00Z"}]}`,
		nil))
	f.put("/api/v1/tenants/bare", obj("Tenant", "", "bare", tcNow, `{}`, `{"phase":"Pending"}`, nil))
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	out := tc.ok("describe", "tenant", "acme")
	golden(t, "describe.tenant", out)
	require.Contains(t, out, "Certificates:\n"+
		"  NAME                       NOT AFTER              ENDS\n"+
		"  etcd-ca                    2026-04-01T00:00:00Z   ended 30d ago\n"+
		"  kubernetes-ca              2036-05-01T12:00:00Z   in 10y\n"+
		"  kubernetes-ca (accepted)   2026-07-01T12:00:00Z   in 61d (within 90 days: rotate it)\n"+
		"  talos-ca                   2026-09-01T12:00:00Z   in 123d\n")
	require.NotContains(t, out, "notAfter:", "the status block leaves them to the table")
	require.Contains(t, out, "CertificatesExpiring")

	// Three months on, the Talos CA enters the window too.
	tc.now = tc.now.Add(100 * 24 * time.Hour)
	require.Contains(t, tc.ok("describe", "tenant", "acme"), "  talos-ca                   2026-09-01T12:00:00Z   in 23d (within 90 days: rotate it)\n")

	require.Contains(t, tc.ok("describe", "tenant", "bare"), "Certificates:\n  <none> (listed once the tenant's secrets bundle exists)\n")
}
