package handlers

import (
	"encoding/json"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Tenant bindings (docs/security.md "Identities and bindings"): an identity has
// a global role and roles on some tenants. A route under /tenants/:tenant is
// judged by the role on that tenant; a tenant the caller may not see answers
// 404, as if it did not exist, so names do not leak. Lists, watches, events
// and the audit log across tenants simply leave out what the caller may not
// see. Everything else (users, providers' changes, provider credentials,
// automation credentials, metrics) needs the global role.

const accessKey = "rezus.access"

// accessOf is the caller's access, compiled once per request.
func accessOf(c echo.Context) domain.Access {
	if acc, ok := c.Get(accessKey).(domain.Access); ok {
		return acc
	}
	acc := identityOf(c).Access()
	c.Set(accessKey, acc)
	return acc
}

// tenantRole is the caller's role on the tenant, looked up with the tenant's
// labels as stored now (none when it does not exist and no binding names it).
func (a *API) tenantRole(acc domain.Access, tenant string) string {
	if !acc.Scoped() {
		return acc.Global()
	}
	var labels map[string]string
	if t, ok := a.cache.GetObject(domain.ObjectRef(domain.TenantKind, "", tenant)); ok {
		labels = t.Metadata.Labels
	}
	return acc.TenantRole(tenant, labels)
}

// tenantFilter answers, per tenant name, whether the caller may see it; nil
// when the caller sees every tenant. Answers are remembered for the request.
func (a *API) tenantFilter(c echo.Context) func(tenant string) bool {
	acc := accessOf(c)
	if !acc.Scoped() && domain.RoleRank(acc.Global()) > 0 {
		return nil
	}
	seen := map[string]bool{}
	return func(tenant string) bool {
		v, ok := seen[tenant]
		if !ok {
			v = domain.RoleRank(a.tenantRole(acc, tenant)) > 0
			if len(seen) < 4096 {
				seen[tenant] = v
			}
		}
		return v
	}
}

// tenantOfKey is the tenant of a list key "<tenant-or-_>.<name>".
func tenantOfKey(kind *domain.KindInfo, key string) string {
	t, name, _ := strings.Cut(key, ".")
	if kind == domain.TenantKind {
		return name
	}
	return t
}

// tenantOfObject is the tenant a raw object belongs to ("" for global kinds).
func tenantOfObject(kind *domain.KindInfo, raw []byte) string {
	var o struct {
		Metadata struct {
			Name   string `json:"name"`
			Tenant string `json:"tenant"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return ""
	}
	if kind == domain.TenantKind {
		return o.Metadata.Name
	}
	return o.Metadata.Tenant
}

// filterListByTenant keeps the items of tenants the caller may see.
func (a *API) filterListByTenant(c echo.Context, kind *domain.KindInfo, res *projections.ListResult) bool {
	if kind != domain.TenantKind && !kind.TenantScoped {
		return false
	}
	see := a.tenantFilter(c)
	if see == nil {
		return false
	}
	items, keys := res.Items[:0], res.Keys[:0]
	for i, raw := range res.Items {
		var t string
		if i < len(res.Keys) {
			t = tenantOfKey(kind, res.Keys[i])
		} else {
			t = tenantOfObject(kind, raw)
		}
		if see(t) {
			items = append(items, raw)
			if i < len(res.Keys) {
				keys = append(keys, res.Keys[i])
			}
		}
	}
	res.Items, res.Keys = items, keys
	return true
}

// routeScope says how a route is judged.
type routeScope int

const (
	// scopeGlobal: the global role.
	scopeGlobal routeScope = iota
	// scopeTenant: the role on the tenant in the URL (404 when none).
	scopeTenant
	// scopeFiltered: any identity; what it may not see is left out.
	scopeFiltered
)

func scopeOf(method, route string) routeScope {
	rest := strings.TrimPrefix(route, "/api/v1/")
	read := method == "GET" || method == "HEAD"
	switch {
	case strings.HasPrefix(rest, "tenants/:tenant"):
		return scopeTenant
	case read && (rest == "tenants" || rest == "events" || rest == "audit"):
		return scopeFiltered
	case read && !strings.Contains(rest, "/"):
		for _, k := range domain.Kinds() {
			if k.Plural == rest && k.TenantScoped {
				return scopeFiltered // a tenant-scoped kind listed across tenants
			}
		}
	}
	return scopeGlobal
}

// globalReadable are the global kinds any identity with a role somewhere may
// read: a tenant's editors pick a Provider for their node groups.
var globalReadable = map[string]bool{"providers": true, "providers/:name": true, "providers/:name/status": true}

// authorize refuses callers whose access does not allow the route.
func (a *API) authorize(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := a.judge(c, identityOf(c), accessOf(c)); err != nil {
			return err
		}
		return next(c)
	}
}

// judge decides whether an identity with that access may call the request's
// route; it only reads c, so a stream's guard may call it again later.
func (a *API) judge(c echo.Context, id identity.Identity, acc domain.Access) error {
	method, route := c.Request().Method, c.Path()
	need := requiredPermission(method, route)
	rest := strings.TrimPrefix(route, "/api/v1/")
	if id.TokenBindings != nil && method != "GET" && (strings.HasPrefix(rest, "apitokens") || rest == "users/:name/password") {
		return &domain.Error{Reason: domain.ReasonForbidden,
			Message: "an API token narrowed by bindings cannot make tokens or change passwords; use the owner's session"}
	}
	role := acc.Global()
	switch scopeOf(method, route) {
	case scopeTenant:
		tenant := c.Param("tenant")
		role = a.tenantRole(acc, tenant)
		if domain.RoleRank(role) == 0 && need != permAuthenticated {
			return domain.NewNotFound(domain.TenantKind.Kind, tenant)
		}
	case scopeFiltered:
		if rest == "audit" {
			// Admins read it all; a tenant's admins the records of their tenants.
			role = acc.Highest()
		} else {
			need = permAuthenticated
		}
	default:
		if globalReadable[rest] && (method == "GET" || method == "HEAD") {
			role = acc.Highest()
		}
	}
	if !roleAllows(role, need) {
		return &domain.Error{Reason: domain.ReasonForbidden,
			Message: "user \"" + id.Name + "\" with role \"" + role + "\" may not " + strings.ToLower(method) + " " + c.Request().URL.Path + " (needs " + need.String() + ")"}
	}
	return nil
}

// tenantLabelHooks keep a caller from raising its own role on a tenant by
// changing the tenant's labels into a richer binding's selector (edit on
// team=a and admin on sandbox=true must not make an editor its admin).
type tenantLabelHooks struct {
	kindHooks
	a *API
}

func (h tenantLabelHooks) admit(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error) {
	if op == domain.OpUpdate && obj != nil {
		if err := h.check(c, ref, obj.Metadata.Labels); err != nil {
			return nil, err
		}
	}
	return h.kindHooks.admit(c, op, ref, obj)
}

func (h tenantLabelHooks) admitPatch(c echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error) {
	if meta, _ := patch["metadata"].(map[string]any); meta != nil {
		if lp, ok := meta["labels"]; ok {
			next := map[string]string{}
			if cur, found := h.a.cache.GetObject(ref); found {
				for k, v := range cur.Metadata.Labels {
					next[k] = v
				}
			}
			if m, _ := lp.(map[string]any); m != nil {
				for k, v := range m {
					if s, isStr := v.(string); isStr {
						next[k] = s
					} else {
						delete(next, k) // null removes the label
					}
				}
			} else if lp == nil {
				next = nil
			}
			if err := h.check(c, ref, next); err != nil {
				return nil, err
			}
		}
	}
	return h.kindHooks.admitPatch(c, ref, patch)
}

func (h tenantLabelHooks) check(c echo.Context, ref domain.Ref, next map[string]string) error {
	acc := accessOf(c)
	if !acc.Scoped() {
		return nil
	}
	before := h.a.tenantRole(acc, ref.Name)
	after := acc.TenantRole(ref.Name, next)
	if domain.RoleRank(after) > domain.RoleRank(before) {
		return domain.NewForbidden(domain.TenantKind.Kind, ref.Name,
			"these labels would give you the role \""+after+"\" on the tenant (you have \""+before+"\"); ask an admin")
	}
	// Nor may it open a Provider to the tenant that its tenantSelector
	// kept out (another team's cloud account): that is an admin's call.
	var cur map[string]string
	if obj, found := h.a.cache.GetObject(ref); found {
		cur = obj.Metadata.Labels
	}
	providers, err := projections.List[domain.Provider](h.a.cache, domain.ProviderKind, projections.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range providers {
		if p.Spec.TenantSelector != "" && !p.Spec.AllowsTenant(cur) && p.Spec.AllowsTenant(next) {
			return domain.NewForbidden(domain.TenantKind.Kind, ref.Name,
				"these labels would open provider \""+p.Metadata.Name+"\" (tenantSelector "+p.Spec.TenantSelector+") to the tenant; ask an admin")
		}
	}
	return nil
}
