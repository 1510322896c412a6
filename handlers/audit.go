package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Credential kinds: downloading one is audited like a write.
const (
	CredentialKubeconfig  = "Kubeconfig"
	CredentialTalosconfig = "Talosconfig"
	// CredentialMachineConfig is a rendered machine config: it holds the tenant's keys.
	CredentialMachineConfig = "MachineConfig"
	// CredentialMachineConfigSecrets is a rendered machine config with the
	// tenant's keys and tokens in it (a global admin's includeSecrets=true).
	CredentialMachineConfigSecrets = "MachineConfigSecrets"
	// CredentialEtcdSnapshot is an etcd backup's plain snapshot: it holds
	// everything the cluster keeps, its secrets included.
	CredentialEtcdSnapshot = "EtcdSnapshot"
	// CredentialKubernetes is a short-lived per-user client certificate of
	// a tenant's cluster (the kubeconfig's exec plugin asks for it).
	CredentialKubernetes = "KubernetesCredential"
	// CredentialKubeconfigBreakGlass is the global admin's long-lived
	// system:masters kubeconfig.
	CredentialKubeconfigBreakGlass = "KubeconfigBreakGlass"
	// CredentialAutoscaler is a cluster-autoscaler client certificate of a
	// tenant (issued and revoked).
	CredentialAutoscaler = "AutoscalerCertificate"
)

var credentialKinds = []string{CredentialKubeconfig, CredentialTalosconfig, CredentialMachineConfig, CredentialMachineConfigSecrets, CredentialEtcdSnapshot,
	CredentialKubernetes, CredentialKubeconfigBreakGlass, CredentialAutoscaler}

// credentialKind returns the credential kind named by s (any case), or "".
func credentialKind(s string) string {
	for _, k := range credentialKinds {
		if strings.EqualFold(k, s) {
			return k
		}
	}
	return ""
}

const (
	// auditTargetKey holds the target a handler named for the request.
	auditTargetKey = "rezus.audit.target"
	// maxAuditPath bounds the recorded path (and detail); URL values are the
	// client's, and anyone may send a long one.
	maxAuditPath = 512
	// truncatedMarker ends a value cut to its bound.
	truncatedMarker = "…(truncated)"
	// maxAuditName bounds recorded tenant and object names taken from the URL.
	maxAuditName = 256
	apiPrefix    = "/api/v1/"
)

// auditTarget is what a request is about.
type auditTarget struct {
	kind, tenant, name string
	// detail is recorded as the record's Detail.
	detail string
}

// auditRequests is the middleware that records, once the handler has
// answered, every request that can change something (any method but GET,
// HEAD and OPTIONS) and every credential download, refused ones included,
// with the final status code. Refused requests without an identity are
// counted and sampled (refusedSampler), not stored one by one. Recording never fails or delays the request
// beyond handing the record to the audit log.
func (a *API) auditRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		if a.audit == nil {
			return next(c)
		}
		finished := false
		defer func() {
			t, named := c.Get(auditTargetKey).(auditTarget)
			secret, isSecret := secretRead(c)
			switch {
			case named:
			case isSecret:
				// Refused before its handler named it (401, 403, a bad name).
				t = secret
			default:
				t = routeTarget(c)
			}
			if !named && !isSecret && !changes(c.Request().Method) && credentialKind(t.kind) == "" {
				return
			}
			code := c.Response().Status
			switch {
			case !finished:
				// The handler panicked; recoverMiddleware answers 500.
				code = http.StatusInternalServerError
			case err != nil && !c.Response().Committed:
				// The error handler runs after us; record what it will send.
				code = statusCodeOf(err)
			}
			a.recordAudit(c, code, t)
		}()
		err = next(c)
		finished = true
		return err
	}
}

func changes(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// recordAudit hands the request's record to the audit log; a refused
// request without an identity goes to the sampler instead, which stores one
// record per source and minute with a count.
func (a *API) recordAudit(c echo.Context, code int, t auditTarget) {
	id := identityOf(c)
	rec := eventstore.AuditRecord{
		Time:          a.cfg.Now().UTC(),
		Actor:         id.Name,
		Role:          id.Role,
		Method:        c.Request().Method,
		Path:          truncate(c.Request().URL.Path, maxAuditPath),
		Kind:          t.kind,
		Tenant:        truncate(t.tenant, maxAuditName),
		Name:          truncate(t.name, maxAuditName),
		Code:          code,
		RequestID:     c.Response().Header().Get(echo.HeaderXRequestID),
		ClientAddress: c.RealIP(),
		Detail:        truncate(t.detail, maxAuditPath),
	}
	if id.Name == "" && code >= 400 && code < 500 {
		a.refused.add(rec)
		return
	}
	a.audit.Append(rec)
}

// truncate cuts s to at most n bytes, ending a cut value with
// truncatedMarker and never splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len(truncatedMarker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncatedMarker
}

// routeTarget reads the kind, tenant and name from the matched route and its
// parameters: /api/v1/tenants[/:tenant[/<sub>]],
// /api/v1/tenants/:tenant/<plural|credential>[/:name][/<sub>] and
// /api/v1/<plural>[/:name][/<sub>]. A Tenant's tenant is itself. A create's
// route names no object; the handler names it with auditObject.
func routeTarget(c echo.Context) auditTarget {
	rest, ok := strings.CutPrefix(c.Path(), apiPrefix)
	if !ok {
		return auditTarget{}
	}
	segs := strings.Split(rest, "/")
	var t auditTarget
	if segs[0] == domain.TenantKind.Plural {
		t.kind = domain.TenantKind.Kind
		if len(segs) < 2 || segs[1] != ":tenant" {
			return t
		}
		t.tenant, t.name = c.Param("tenant"), c.Param("tenant")
		if len(segs) < 3 {
			return t
		}
		k, ok := domain.LookupKind(segs[2])
		switch {
		case ok && k.TenantScoped && k.Plural == segs[2]:
			t.kind, t.name = k.Kind, ""
		case credentialKind(segs[2]) != "":
			t.kind, t.name = credentialKind(segs[2]), ""
		default:
			// A subresource of the tenant itself, e.g. /tenants/:tenant/status.
			return t
		}
		segs = segs[2:]
	} else if k, ok := domain.LookupKind(segs[0]); ok && k.Plural == segs[0] {
		t.kind = k.Kind
	} else {
		return t
	}
	if len(segs) > 1 && segs[1] == ":name" {
		t.name = c.Param("name")
	}
	return t
}

// secretRead reports whether the request reads something that carries a
// tenant's secrets, or is issued a credential, and names it: kubeconfig,
// talosconfig, a Kubernetes credential, a machine's or a node group's
// rendered config, terraform state. Such requests are audited under their
// own kind whatever their outcome, refused ones (before any handler ran)
// included: a refused issuance named after the route would be a Tenant's.
func secretRead(c echo.Context) (auditTarget, bool) {
	tenant := c.Param("tenant")
	if c.Request().Method == http.MethodPost && c.Path() == apiPrefix+"tenants/:tenant/kubernetes/credential" {
		// Named after the caller, as the handler names an issuance.
		return auditTarget{kind: CredentialKubernetes, tenant: tenant, name: identityOf(c).Name}, true
	}
	if changes(c.Request().Method) {
		return auditTarget{}, false
	}
	switch c.Path() {
	case apiPrefix + "tenants/:tenant/kubeconfig":
		return auditTarget{kind: CredentialKubeconfig, tenant: tenant}, true
	case apiPrefix + "tenants/:tenant/kubeconfig/admin":
		return auditTarget{kind: CredentialKubeconfigBreakGlass, tenant: tenant}, true
	case apiPrefix + "tenants/:tenant/talosconfig":
		return auditTarget{kind: CredentialTalosconfig, tenant: tenant}, true
	case apiPrefix + "tenants/:tenant/machines/:name/config", apiPrefix + "tenants/:tenant/nodegroups/:name/config":
		return auditTarget{kind: CredentialMachineConfig, tenant: tenant, name: c.Param("name")}, true
	case apiPrefix + "tenants/:tenant/etcdbackups/:name/snapshot":
		return auditTarget{kind: CredentialEtcdSnapshot, tenant: tenant, name: c.Param("name")}, true
	case apiPrefix + "tenants/:tenant/state":
		return auditTarget{kind: stateKind, tenant: tenant, name: tenant}, true
	}
	return auditTarget{}, false
}

// auditObject names the object a request is about when its route does not:
// a create names it in the body. Handlers call it once they know the object.
func auditObject(c echo.Context, ref domain.Ref) {
	t := auditTarget{kind: ref.Kind, tenant: ref.Tenant, name: ref.Name}
	if ref.Kind == domain.TenantKind.Kind {
		t.tenant = ref.Name
	}
	c.Set(auditTargetKey, t)
}

// AuditCredentialDownload marks the request as a download of a credential
// (kind CredentialKubeconfig, CredentialTalosconfig, …) of a tenant's object:
// the audit middleware records it, with the final status code, like a
// write. Routes ending in /kubeconfig or /talosconfig are recorded without
// it; handlers serving credentials elsewhere (the web UI) must call it
// before answering.
func (a *API) AuditCredentialDownload(c echo.Context, kind, tenant, name string) {
	c.Set(auditTargetKey, auditTarget{kind: kind, tenant: tenant, name: name})
}

type auditList struct {
	APIVersion string                   `json:"apiVersion"`
	Kind       string                   `json:"kind"`
	Metadata   replayMeta               `json:"metadata"`
	Items      []eventstore.AuditRecord `json:"items"`
}

// auditTrail serves GET /api/v1/audit: the audit records, oldest first,
// filtered by time or sequence, actor, kind and tenant; follow=true keeps
// streaming new records as SSE; newest=N answers the newest N matching
// records of the window instead of the oldest.
func (a *API) auditTrail(c echo.Context) error {
	if a.audit == nil {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "this server keeps no audit log"}
	}
	q := c.QueryParams()
	rq, causes := parseReplayQuery(c)
	aq := eventstore.AuditQuery{Window: rq.window, Limit: rq.limit, Newest: rq.newest, Actor: q.Get("actor"), Tenant: q.Get("tenant")}
	if v := q.Get("kind"); v != "" {
		if _, ok := domain.LookupKind(v); !ok && credentialKind(v) == "" && v != AuditSSOLogin {
			causes = append(causes, domain.Cause{Field: "kind", Type: domain.CauseNotSupported,
				Message: fmt.Sprintf("%q is neither a kind nor one of %s, %s", v, strings.Join(credentialKinds, ", "), AuditSSOLogin)})
		}
		aq.Kind = v
	}
	causes = append(causes, nameCause("tenant", aq.Tenant)...)
	if len(aq.Actor) > maxAuditName {
		causes = append(causes, domain.Cause{Field: "actor", Type: domain.CauseTooLong, Message: fmt.Sprintf("must be no more than %d characters", maxAuditName)})
	}
	if len(causes) > 0 {
		return domain.NewBadRequest("bad audit query: "+causeSummary(causes), causes...)
	}

	g := a.newStreamGuard(c)
	visible := a.auditVisibility(g)
	if rq.follow {
		return a.follow(c, g, sseAudit, "audit records", func(ctx context.Context) (sseSource, error) {
			cur, err := a.audit.Follow(ctx, aq)
			if err != nil {
				return nil, err
			}
			return auditSource{cur: cur, visible: visible}, nil
		})
	}
	recs, more, err := a.audit.Query(c.Request().Context(), aq)
	if err != nil {
		return err
	}
	out := auditList{APIVersion: domain.APIVersion, Kind: "AuditRecordList", Items: make([]eventstore.AuditRecord, 0, len(recs))}
	for _, rec := range recs {
		if visible(&rec) {
			out.Items = append(out.Items, rec)
		}
	}
	if more {
		// After the last record read, shown or not.
		out.Metadata.Continue = strconv.FormatUint(recs[len(recs)-1].Seq, 10)
	}
	return c.JSON(http.StatusOK, out)
}

// auditVisibility: an admin reads every record; a tenant's admin (through a
// binding) the records about its tenants.
func (a *API) auditVisibility(g *streamGuard) func(*eventstore.AuditRecord) bool {
	return func(rec *eventstore.AuditRecord) bool {
		acc := g.access()
		if acc.Global() == domain.RoleAdmin {
			return true
		}
		return rec.Tenant != "" && a.tenantRole(acc, rec.Tenant) == domain.RoleAdmin
	}
}

// auditSource follows audit records for an SSE stream.
type auditSource struct {
	cur     *eventstore.AuditCursor
	visible func(*eventstore.AuditRecord) bool
}

func (s auditSource) Next(ctx context.Context) (uint64, []byte, error) {
	for {
		rec, err := s.cur.Next(ctx)
		if err != nil {
			return 0, nil, err
		}
		if !s.visible(&rec) {
			continue
		}
		b, err := json.Marshal(rec)
		return rec.Seq, b, err
	}
}

func (s auditSource) Stop() { s.cur.Stop() }
