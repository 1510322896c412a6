package handlers_test

import (
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// expectedAllowed is the role model as the issue states it, written out
// independently of the server's policy: view reads everything but secrets;
// edit also changes tenants, node groups, machines, config patches and
// downloads credentials and terraform state; admin also manages users,
// providers, provider credentials, other users' tokens, force-unlocks state,
// reads the audit log, lists the replicas, downloads backups of the server's data and writes any /status subresource by hand. Token and password routes are open to every
// role and check ownership in the handler.
func expectedAllowed(role, method, route string) bool {
	read := method == http.MethodGet
	switch {
	case route == "/api/v1/auth/login":
		return true
	case strings.HasPrefix(route, "/api/v1/auth/"), route == "/api/v1/users/:name/password":
		return true
	case strings.HasSuffix(route, "/status") && !read: // status is the controllers'; by hand, admin only
		return role == domain.RoleAdmin
	case strings.HasPrefix(route, "/api/v1/apitokens"):
		return true
	case strings.HasPrefix(route, "/api/v1/admin/"): // backups of the server's data
		return role == domain.RoleAdmin
	case route == "/api/v1/replicas": // the hosts, their NATS nodes and releases
		return role == domain.RoleAdmin
	case strings.HasPrefix(route, "/api/v1/audit"), strings.HasPrefix(route, "/api/v1/automation-credentials"): // NATS credentials: admin
		return role == domain.RoleAdmin
	case route == "/api/v1/tenants/:tenant/health": // probing through the Talos API only reads
		return read
	case route == "/api/v1/tenants/:tenant/machines/:name/logs", route == "/api/v1/tenants/:tenant/machines/:name/dmesg":
		return read // machine logs through the Talos API: read only, every role
	case strings.HasSuffix(route, "/etcdbackups/:name/snapshot"): // an etcd snapshot holds the cluster's secrets: global admins
		return role == domain.RoleAdmin
	case route == "/api/v1/tenants/:tenant/kubeconfig/admin": // break-glass system:masters: global admins
		return role == domain.RoleAdmin
	case route == "/api/v1/tenants/:tenant/kubeconfig", route == "/api/v1/tenants/:tenant/talosconfig",
		route == "/api/v1/tenants/:tenant/kubernetes/credential":
		return true // per-user, short-lived credentials of the caller's own role on the tenant
	case strings.HasSuffix(route, "/config"):
		return role != domain.RoleView // rendered configs; their keys only to global admins (includeSecrets)
	case strings.HasPrefix(route, "/api/v1/credentials/"): // provider credentials, even their names
		return role == domain.RoleAdmin
	case route == "/api/v1/tenants/:tenant/state/lock": // force-unlock
		return role == domain.RoleAdmin
	case route == "/api/v1/tenants/:tenant/state", route == "/api/v1/tenants/:tenant/state/versions":
		return role != domain.RoleView // terraform state holds the tenant's secrets
	case read:
		return true
	case strings.HasPrefix(route, "/api/v1/users"), strings.HasPrefix(route, "/api/v1/providers"), strings.HasPrefix(route, "/api/v1/groupbindings"),
		strings.HasPrefix(route, "/api/v1/rollouts"): // a rollout changes many tenants at once
		return role == domain.RoleAdmin
	default:
		return role != domain.RoleView
	}
}

// TestEveryRouteEveryRole walks every registered route with every role and
// checks that exactly the routes the role model forbids answer 403.
func TestEveryRouteEveryRole(t *testing.T) {
	s := newTalosStack(t).stack // with every optional part wired, so every route is walked
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	tokens := map[string]string{}
	for _, role := range []string{domain.RoleView, domain.RoleEdit, domain.RoleAdmin} {
		s.createUser("u-"+role, role, "password for "+role+" user")
		tokens[role] = s.sessionToken("u-"+role, "password for "+role+" user")
	}
	routes := s.api.Echo().Routes()
	sort.Slice(routes, func(i, j int) bool { return routes[i].Path+routes[i].Method < routes[j].Path+routes[j].Method })
	walked := 0
	for _, rt := range routes {
		if !strings.HasPrefix(rt.Path, "/api/v1/") && rt.Path != "/metrics" {
			continue
		}
		if rt.Method == "echo_route_any" || strings.Contains(rt.Path, "*") || rt.Path == "/api/v1/auth/logout" {
			continue // logout would end the walker's own session; it is tested on its own
		}
		// Items that do not exist (so allowed writes fail harmlessly with 404/422),
		// in a tenant that does.
		path := strings.NewReplacer(":tenant/", "acme/", ":name", "does-not-exist").Replace(rt.Path)
		if strings.HasSuffix(path, ":tenant") {
			path = strings.TrimSuffix(path, ":tenant") + "does-not-exist"
		}
		for _, role := range []string{domain.RoleView, domain.RoleEdit, domain.RoleAdmin} {
			body := "{}"
			if rt.Method == http.MethodGet || rt.Method == http.MethodDelete {
				body = ""
			}
			headers := append(bearer(tokens[role]), "Content-Type", "application/json")
			if rt.Method == http.MethodPatch {
				headers = append(headers, "Content-Type", "application/merge-patch+json")
			}
			if strings.Contains(rt.Path, "follow") || strings.HasSuffix(rt.Path, "/audit") || strings.HasSuffix(rt.Path, "/events") {
				path += "?limit=1"
			}
			if rt.Path == "/api/v1/users/:name/password" {
				path = "/api/v1/users/u-" + role + "/password" // one's own; others' is an ownership check
			}
			r := s.do(rt.Method, path, body, headers...)
			want := expectedAllowed(role, rt.Method, rt.Path)
			if want {
				require.NotEqual(t, http.StatusForbidden, r.Code, "%s %s as %s: %s", rt.Method, path, role, r.Body)
			} else {
				require.Equal(t, http.StatusForbidden, r.Code, "%s %s as %s: %s", rt.Method, path, role, r.Body)
				require.Equal(t, domain.ReasonForbidden, r.status(t).Reason)
			}
			require.NotEqual(t, http.StatusInternalServerError, r.Code, "%s %s as %s: %s", rt.Method, path, role, r.Body)
			walked++
		}
	}
	require.Greater(t, walked, 150)
	// The acme tenant survived the walk: nothing allowed was destructive by accident.
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/acme", nil).Code)
}
