package handlers_test

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// createBoundUser makes a user with a global role and tenant bindings.
func (s *stack) createBoundUser(name, role, bindings string) string {
	s.t.Helper()
	body := fmt.Sprintf(`{"metadata":{"name":%q},"spec":{"role":%q,"bindings":%s,"password":%q}}`, name, role, bindings, alicePassword)
	r := s.do(http.MethodPost, "/api/v1/users", body)
	require.Equal(s.t, http.StatusCreated, r.Code, string(r.Body))
	return s.sessionToken(name, alicePassword)
}

// bindingCase is one identity of the route table walk: its role on the
// tenant acme, and its global role and highest role anywhere.
type bindingCase struct {
	name            string
	onAcme          string
	global, highest string
	narrowed        bool
}

// expectedForBinding is the tenant-binding model written out independently
// of the server's policy: a route under /tenants/:tenant is judged by the
// role on that tenant (none: 404, names do not leak); lists across tenants,
// the tenants list and events are open (filtered); the audit log needs admin
// somewhere (filtered); providers are readable with any role; everything else
// needs the global role. A token narrowed by bindings makes no tokens.
func expectedForBinding(b bindingCase, method, route string) int {
	rest := strings.TrimPrefix(route, "/api/v1/")
	read := method == http.MethodGet
	forbid := func(ok bool) int {
		if ok {
			return 0
		}
		return http.StatusForbidden
	}
	switch {
	case b.narrowed && !read && (strings.HasPrefix(rest, "apitokens") || rest == "users/:name/password"):
		return http.StatusForbidden
	case rest == "tenants/:tenant/kubeconfig/admin", strings.HasSuffix(rest, "/etcdbackups/:name/snapshot"):
		if b.onAcme == domain.RoleNone {
			return http.StatusNotFound
		}
		// break-glass and etcd snapshots: the global role, not a binding
		return forbid(b.global == domain.RoleAdmin && !b.narrowed)
	case strings.HasPrefix(rest, "tenants/:tenant"):
		if b.onAcme == domain.RoleNone {
			return http.StatusNotFound
		}
		return forbid(allowedFor(b.onAcme, method, route))
	case read && (rest == "tenants" || rest == "events"):
		return 0
	case read && !strings.Contains(rest, "/") && isTenantScopedPlural(rest):
		return 0
	case read && rest == "audit":
		return forbid(b.highest == domain.RoleAdmin)
	case read && strings.HasPrefix(rest, "providers"):
		return forbid(domain.RoleRank(b.highest) > 0)
	case route == "/metrics":
		return forbid(domain.RoleRank(b.global) > 0)
	}
	return forbid(allowedFor(b.global, method, route))
}

// allowedFor is expectedAllowed with role none: only the routes open to every
// identity (login and the like, one's own tokens and password).
func allowedFor(role, method, route string) bool {
	if domain.RoleRank(role) > 0 {
		return expectedAllowed(role, method, route)
	}
	rest := strings.TrimPrefix(route, "/api/v1/")
	if strings.HasSuffix(rest, "/status") && method != http.MethodGet {
		return false
	}
	return strings.HasPrefix(rest, "auth/") || strings.HasPrefix(rest, "apitokens") || rest == "users/:name/password"
}

func isTenantScopedPlural(p string) bool {
	for _, k := range domain.Kinds() {
		if k.Plural == p && k.TenantScoped {
			return true
		}
	}
	return false
}

// TestEveryRouteEveryBinding walks every registered route with identities
// that hold roles through tenant bindings (by name, by selector, a narrowed
// token) and checks each answer against the model: a new route without a
// rule in expectedForBinding is judged by the global role, so a tenant route
// the server leaves open fails here.
func TestEveryRouteEveryBinding(t *testing.T) {
	s := newTalosStack(t).stack
	s.mustCreate("/api/v1/tenants", tenantBody("acme", map[string]string{"env": "prod"}))
	s.mustCreate("/api/v1/tenants", tenantBody("beta", map[string]string{"env": "dev"}))
	tokens := map[string]string{
		"acme-admin":     s.createBoundUser("acme-admin", domain.RoleNone, `[{"role":"admin","tenants":["acme"]}]`),
		"prod-view":      s.createBoundUser("prod-view", domain.RoleNone, `[{"role":"view","tenantSelector":"env in (prod)"}]`),
		"beta-edit":      s.createBoundUser("beta-edit", domain.RoleNone, `[{"role":"edit","tenants":["beta"]}]`),
		"view-acme-edit": s.createBoundUser("view-acme-edit", domain.RoleView, `[{"role":"edit","tenants":["acme"]}]`),
	}
	s.createUser("boss", domain.RoleAdmin, alicePassword)
	tokens["narrowed"], _ = s.createToken(`{"spec":{"bindings":[{"role":"edit","tenants":["acme"]}]}}`, bearer(s.sessionToken("boss", alicePassword))...)
	cases := []bindingCase{
		{name: "acme-admin", onAcme: domain.RoleAdmin, global: domain.RoleNone, highest: domain.RoleAdmin},
		{name: "prod-view", onAcme: domain.RoleView, global: domain.RoleNone, highest: domain.RoleView},
		{name: "beta-edit", onAcme: domain.RoleNone, global: domain.RoleNone, highest: domain.RoleEdit},
		{name: "view-acme-edit", onAcme: domain.RoleEdit, global: domain.RoleView, highest: domain.RoleEdit},
		{name: "narrowed", onAcme: domain.RoleEdit, global: domain.RoleNone, highest: domain.RoleEdit, narrowed: true},
	}
	routes := s.api.Echo().Routes()
	sort.Slice(routes, func(i, j int) bool { return routes[i].Path+routes[i].Method < routes[j].Path+routes[j].Method })
	walked := 0
	for _, rt := range routes {
		if !strings.HasPrefix(rt.Path, "/api/v1/") && rt.Path != "/metrics" {
			continue
		}
		if rt.Method == "echo_route_any" || strings.Contains(rt.Path, "*") || rt.Path == "/api/v1/auth/logout" {
			continue
		}
		path := strings.NewReplacer(":tenant/", "acme/", ":name", "does-not-exist").Replace(rt.Path)
		if strings.HasSuffix(path, ":tenant") {
			path = strings.TrimSuffix(path, ":tenant") + "acme"
		}
		for _, b := range cases {
			body := "{}"
			if rt.Method == http.MethodGet || rt.Method == http.MethodDelete {
				body = ""
			}
			headers := append(bearer(tokens[b.name]), "Content-Type", "application/json")
			if rt.Method == http.MethodPatch {
				headers = append(headers, "Content-Type", "application/merge-patch+json")
			}
			p := path
			if strings.HasSuffix(rt.Path, "/audit") || strings.HasSuffix(rt.Path, "/events") {
				p += "?limit=1"
			}
			if rt.Path == "/api/v1/users/:name/password" {
				p = "/api/v1/users/" + b.name + "/password"
			}
			want := expectedForBinding(b, rt.Method, rt.Path)
			if want == 0 && rt.Method == http.MethodDelete && rt.Path == "/api/v1/tenants/:tenant" {
				continue // an allowed delete would end the walk's tenant; tested on its own
			}
			r := s.do(rt.Method, p, body, headers...)
			switch want {
			case 0:
				require.NotEqual(t, http.StatusForbidden, r.Code, "%s %s as %s: %s", rt.Method, p, b.name, r.Body)
				if strings.HasPrefix(rt.Path, "/api/v1/tenants/:tenant") {
					require.NotContains(t, string(r.Body), `tenant \"acme\" not found`, "%s %s as %s", rt.Method, p, b.name)
				}
			default:
				require.Equal(t, want, r.Code, "%s %s as %s: %s", rt.Method, p, b.name, r.Body)
			}
			require.NotEqual(t, http.StatusInternalServerError, r.Code, "%s %s as %s: %s", rt.Method, p, b.name, r.Body)
			walked++
		}
	}
	require.Greater(t, walked, 250)
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/acme", nil).Code)
}
