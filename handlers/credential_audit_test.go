package handlers_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// TestCredentialIssuancesAuditedUnderTheirKind (issue 42, finding 11): every
// issuance of a cluster credential, allowed or refused, whatever refused it
// (no identity, no role on the tenant, the role's rule, a bad name in the
// URL), is an audit record of the credential's own kind, read back through
// the audit log API: KubernetesCredential named after its user,
// Talosconfig, KubeconfigBreakGlass. Refused POSTs to
// …/kubernetes/credential were recorded as kind Tenant before.
func TestCredentialIssuancesAuditedUnderTheirKind(t *testing.T) {
	ts := newTalosStack(t)
	ts.acme()
	s := ts.stack
	stopSampler := runAuditSampler(t, s.api)
	view := bearer(s.createBoundUser("vic", domain.RoleNone, `[{"role":"view","tenants":["acme"]}]`))
	stranger := bearer(s.createBoundUser("oz", domain.RoleNone, `[]`))
	anonymous := []string{"Authorization", ""}

	const issue = "/api/v1/tenants/acme/kubernetes/credential"
	tests := []struct {
		name, method, path           string
		auth                         []string
		code                         int
		kind, actor, tenant, objName string
	}{
		{"issued", http.MethodPost, issue, view, http.StatusCreated, "KubernetesCredential", "vic", "acme", "vic"},
		{"no role on the tenant", http.MethodPost, issue, stranger, http.StatusNotFound, "KubernetesCredential", "oz", "acme", "oz"},
		{"a bad tenant name", http.MethodPost, "/api/v1/tenants/Not_A_Name/kubernetes/credential", view, http.StatusNotFound, "KubernetesCredential", "vic", "Not_A_Name", "vic"},
		{"a bad tenant name, global view", http.MethodPost, "/api/v1/tenants/Not_A_Name/kubernetes/credential",
			bearer(s.createBoundUser("gv", domain.RoleView, `[]`)), http.StatusBadRequest, "KubernetesCredential", "gv", "Not_A_Name", "gv"},
		{"talosconfig, no role", http.MethodGet, "/api/v1/tenants/acme/talosconfig", stranger, http.StatusNotFound, "Talosconfig", "oz", "acme", ""},
		{"talosconfig", http.MethodGet, "/api/v1/tenants/acme/talosconfig", view, http.StatusOK, "Talosconfig", "vic", "acme", ""},
		{"break-glass, no role", http.MethodGet, "/api/v1/tenants/acme/kubeconfig/admin", stranger, http.StatusNotFound, "KubeconfigBreakGlass", "oz", "acme", ""},
		{"break-glass, view", http.MethodGet, "/api/v1/tenants/acme/kubeconfig/admin", view, http.StatusForbidden, "KubeconfigBreakGlass", "vic", "acme", ""},
	}
	for _, tt := range tests {
		r := s.do(tt.method, tt.path, nil, tt.auth...)
		require.Equal(t, tt.code, r.Code, "%s: %s", tt.name, r.Body)
	}
	// Without an identity: sampled per source and minute, and per
	// credential kind, so the refused issuance is not folded into another
	// kind's record.
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", `{}`, anonymous...).Code)
	for range 3 {
		require.Equal(t, http.StatusUnauthorized, s.do(http.MethodPost, issue, nil, anonymous...).Code)
	}
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/tenants/acme/talosconfig", nil, anonymous...).Code)
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/tenants/acme/kubeconfig/admin", nil, anonymous...).Code)
	stopSampler()

	type seen struct {
		kind, actor, tenant, name string
		code, count               int
	}
	byPath := func(kind string) map[string][]seen {
		page := s.auditPage(t, "?kind="+kind)
		out := map[string][]seen{}
		for _, r := range page.Items {
			k := r.Method + " " + r.Path
			out[k] = append(out[k], seen{r.Kind, r.Actor, r.Tenant, r.Name, r.Code, r.Count})
		}
		return out
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := map[string]map[string][]seen{}
		for _, kind := range []string{"KubernetesCredential", "Talosconfig", "KubeconfigBreakGlass"} {
			got[kind] = byPath(kind)
		}
		for _, tt := range tests {
			want := seen{tt.kind, tt.actor, tt.tenant, tt.objName, tt.code, 0}
			assert.Contains(c, got[tt.kind][tt.method+" "+tt.path], want, "%s: %+v", tt.name, got)
		}
		for kind, path := range map[string]string{"KubernetesCredential": "POST " + issue,
			"Talosconfig": "GET /api/v1/tenants/acme/talosconfig", "KubeconfigBreakGlass": "GET /api/v1/tenants/acme/kubeconfig/admin"} {
			var anon []seen
			for _, r := range got[kind][path] {
				if r.actor == "" {
					anon = append(anon, r)
				}
			}
			assert.Len(c, anon, 1, "%s: the anonymous refusals' record: %+v", kind, got[kind])
			if len(anon) == 1 {
				assert.Equal(c, http.StatusUnauthorized, anon[0].code)
				assert.Equal(c, "acme", anon[0].tenant)
			}
		}
	}, 10*time.Second, 50*time.Millisecond)
	page := s.auditPage(t, "?kind=KubernetesCredential")
	for _, r := range page.Items {
		if r.Actor == "" {
			require.Equal(t, 3, r.Count, fmt.Sprintf("%+v", r))
		}
	}
	require.NotContains(t, fmt.Sprint(tenantRecords(t, ts.audit)), issue, "no issuance is recorded as a Tenant")
}

// tenantRecords are the audit records of kind Tenant.
func tenantRecords(t *testing.T, audit *eventstore.AuditLog) []eventstore.AuditRecord {
	t.Helper()
	var out []eventstore.AuditRecord
	for _, r := range storedAudit(t, audit) {
		if r.Kind == domain.TenantKind.Kind {
			out = append(out, r)
		}
	}
	return out
}
