package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestProviderTenantSelector: issue 27, finding 10. An editor of one tenant
// built node groups on any Provider, including one holding another team's
// cloud account. A Provider's spec.tenantSelector names the tenants that may
// use it: others are refused at write with the field at fault, and a scoped
// editor may not relabel its tenant into the selector.
func TestProviderTenantSelector(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/providers", map[string]any{"metadata": map[string]any{"name": "team-a-cloud"},
		"spec": map[string]any{"type": "emulated", "config": map[string]any{"endpoint": "http://127.0.0.1:1"}, "tenantSelector": "team=a"}})
	s.mustCreate("/api/v1/tenants", tenantBody("acme", map[string]string{"team": "a"}))
	s.mustCreate("/api/v1/tenants", tenantBody("beta", map[string]string{"team": "b"}))
	bob := bearer(s.createBoundUser("bob", domain.RoleNone, `[{"role":"edit","tenants":["beta"]}]`))
	group := map[string]any{"metadata": map[string]any{"name": "workers"},
		"spec": map[string]any{"role": "worker", "count": 1, "provider": "team-a-cloud"}}

	r := s.do(http.MethodPost, "/api/v1/tenants/beta/nodegroups", group, bob...)
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	st := r.status(t)
	require.Equal(t, "spec.provider", st.Details.Causes[0].Field)
	require.Contains(t, st.Details.Causes[0].Message, `provider "team-a-cloud" serves only tenants matching "team=a"; tenant beta does not`)
	// Not even an admin builds beta on it: the selector is the Provider's rule.
	require.Equal(t, http.StatusUnprocessableEntity, s.do(http.MethodPost, "/api/v1/tenants/beta/nodegroups", group).Code)
	s.mustCreate("/api/v1/tenants/acme/nodegroups", group)

	// Bob may edit beta's labels, but not into the Provider's selector.
	patch := append(bob, "Content-Type", "application/merge-patch+json")
	r = s.do(http.MethodPatch, "/api/v1/tenants/beta", `{"metadata":{"labels":{"team":"a"}}}`, patch...)
	require.Equal(t, http.StatusForbidden, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), `would open provider \"team-a-cloud\"`)
	r = s.do(http.MethodPatch, "/api/v1/tenants/beta", `{"metadata":{"labels":{"tier":"gold"}}}`, patch...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))

	// A selector that does not parse is refused with its field.
	r = s.do(http.MethodPost, "/api/v1/providers", map[string]any{"metadata": map[string]any{"name": "bad"},
		"spec": map[string]any{"type": "metal", "tenantSelector": "team in (a"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	require.Equal(t, "spec.tenantSelector", r.status(t).Details.Causes[0].Field)
}
