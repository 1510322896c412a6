package webui

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestGroupBindingsCreateAndDelete(t *testing.T) {
	s := newUIStack(t)
	b := s.signIn("boss", "admin")
	page := b.get("/ui/settings/groups")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.Contains(t, page.Body, "No group bindings yet.")

	for _, tc := range []struct {
		name  string
		form  url.Values
		field string
	}{
		{"no groups", url.Values{"metadata.name": {"plat"}, "spec.groups": {" , "}, "spec.role": {"view"}}, "spec.groups"},
		{"grants nothing", url.Values{"metadata.name": {"plat"}, "spec.groups": {"platform"}, "spec.role": {"none"}}, "spec.bindings"},
		{"bad selector", url.Values{"metadata.name": {"plat"}, "spec.groups": {"platform"}, "spec.role": {"none"},
			"binding.role": {"edit"}, "binding.tenants": {""}, "binding.tenantSelector": {"team in ("}}, "spec.bindings[0].tenantSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := b.hx(http.MethodPost, "/ui/settings/groups", tc.form)
			require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
			require.Contains(t, p.Body, `data-field-error="`+tc.field+`"`, p.Body)
			require.Contains(t, p.Body, `data-testid="groupbinding-create"`)
		})
	}

	p := b.hx(http.MethodPost, "/ui/settings/groups", url.Values{"metadata.name": {"plat"}, "spec.groups": {"platform, sre"}, "spec.role": {"none"},
		"binding.role": {"edit"}, "binding.tenants": {""}, "binding.tenantSelector": {"team=platform"}})
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	require.Contains(t, p.Body, "Group binding plat was created")
	require.Contains(t, p.Body, `data-groupbinding="plat"`)
	require.Contains(t, p.Body, "edit where team=platform")
	var gb domain.GroupBinding
	s.apiCall(http.MethodGet, "/groupbindings/plat", nil, &gb)
	require.Equal(t, []string{"platform", "sre"}, gb.Spec.Groups)
	require.Equal(t, []domain.RoleBinding{{Role: "edit", TenantSelector: "team=platform"}}, gb.Spec.Bindings)

	del := b.hx(http.MethodDelete, "/ui/settings/groups/plat", nil)
	require.Equal(t, http.StatusOK, del.Code, del.Body)
	require.NotContains(t, del.Body, `data-groupbinding="plat"`)

	viewer := s.signIn("vera", "view")
	require.Equal(t, http.StatusForbidden, viewer.get("/ui/settings/groups").Code)
	require.NotContains(t, viewer.get("/ui/settings").Body, "/ui/settings/groups")
}
