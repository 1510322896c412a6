package handlers

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// permission is what a route needs of the caller's role.
type permission int

const (
	// permAuthenticated: any identity; the handler checks ownership where it matters.
	permAuthenticated permission = iota
	// permRead: view, edit and admin.
	permRead
	// permWrite: edit and admin (changing resources, downloading cluster credentials).
	permWrite
	// permAdmin: admin only (users, providers, other users' tokens, audit,
	// writing any /status subresource by hand).
	permAdmin
)

func (p permission) String() string {
	return [...]string{"authenticated", "read", "write", "admin"}[p]
}

// roleAllows is the whole role model: view reads, edit also writes, admin also administers.
func roleAllows(role string, p permission) bool {
	if p == permAuthenticated {
		return true // any identity, role none included
	}
	switch role {
	case domain.RoleAdmin:
		return true
	case domain.RoleEdit:
		return p <= permWrite
	case domain.RoleView:
		return p <= permRead
	}
	return false
}

// adminKinds can be changed by admins only.
var adminKinds = map[string]bool{"users": true, "providers": true, "groupbindings": true, "rollouts": true}

// requiredPermission is the policy for one route (echo's route pattern) and method.
func requiredPermission(method, route string) permission {
	rest := strings.TrimPrefix(route, "/api/v1/")
	read := method == http.MethodGet || method == http.MethodHead
	switch {
	case route == "/metrics":
		return permRead
	case strings.HasPrefix(rest, "auth/"):
		return permAuthenticated
	case strings.HasPrefix(rest, "admin/"):
		return permAdmin // backups of the server's data: every secret, sealed, and the NATS seeds
	case rest == "replicas":
		return permAdmin // names the hosts, their NATS nodes and releases
	case strings.HasPrefix(rest, "audit"), strings.HasPrefix(rest, "automation-credentials"), strings.HasPrefix(rest, "credentials/"):
		return permAdmin // provider credentials: admin, reading their names too
	case strings.HasPrefix(rest, "tenants/") && strings.HasSuffix(rest, "/state/lock"):
		return permAdmin // force-unlock
	case strings.HasPrefix(rest, "tenants/") && (strings.HasSuffix(rest, "/state") || strings.HasSuffix(rest, "/state/versions")):
		return permWrite // terraform state holds the tenant's secrets
	case strings.HasPrefix(rest, "events"):
		return permRead
	case rest == "users/:name/password":
		return permAuthenticated // self, or admin for anyone: checked by the handler
	case strings.HasSuffix(rest, "/status") && !read:
		// Controllers write status in process; by hand only an admin may
		// (tenants, node groups, machines, applies, upgrades, tokens, …).
		return permAdmin
	case strings.HasPrefix(rest, "apitokens"):
		return permAuthenticated // own tokens, or admin for anyone: checked by the handler
	case rest == "tenants/:tenant/health":
		return permRead // health through the Talos API: reading, for every role
	case rest == "tenants/:tenant/machines/:name/logs", rest == "tenants/:tenant/machines/:name/dmesg":
		return permRead // logs through the Talos API: lower-layer state, read only, for every role
	case rest == "tenants/:tenant/kubeconfig/admin":
		return permAdmin // break-glass system:masters; the handler also wants the global role
	case rest == "tenants/:tenant/kubeconfig", rest == "tenants/:tenant/talosconfig", rest == "tenants/:tenant/kubernetes/credential":
		return permRead // per-user, short-lived, by the caller's role on the tenant
	case strings.HasSuffix(rest, "/config") && strings.HasPrefix(rest, "tenants/"):
		return permWrite // rendered configs; their keys only with includeSecrets, for global admins (the handler)
	case strings.HasPrefix(rest, "tenants/") && strings.HasSuffix(rest, "/etcdbackups/:name/snapshot"):
		return permAdmin // an etcd snapshot holds the cluster's secrets; the handler also wants the global role
	}
	if read {
		return permRead
	}
	if adminKinds[strings.SplitN(rest, "/", 2)[0]] {
		return permAdmin
	}
	return permWrite
}

// isAdmin reports whether the caller is an admin.
func isAdmin(c echo.Context) bool { return identityOf(c).Role == domain.RoleAdmin }

// CanWrite reports whether role may change resources (edit and admin).
func CanWrite(role string) bool { return roleAllows(role, permWrite) }

// CanAdmin reports whether role may administer users, providers and the audit log.
func CanAdmin(role string) bool { return roleAllows(role, permAdmin) }
