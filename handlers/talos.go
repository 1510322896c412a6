package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// talosRoutes serves rendered machine configs and cluster credentials. Every
// route needs the edit role: configs and credentials carry the tenant's keys.
//
// A diff of a pending patch is asked for with ?diff=<configpatch name>: the
// answer (text/x-diff) is the unified diff between the config without that
// patch and with it (taken as enabled, its target respected), so a patch can
// be stored disabled, reviewed, then enabled. An empty answer means the patch
// does not change this config.
func (a *API) talosRoutes(g *authed) {
	g.GET("/tenants/:tenant/machines/:name/config", a.machineConfig)
	g.GET("/tenants/:tenant/nodegroups/:name/config", a.nodeGroupConfig)
	g.GET("/tenants/:tenant/talosconfig", a.talosconfig)
	g.GET("/tenants/:tenant/kubeconfig", a.kubeconfig)
	g.GET("/tenants/:tenant/kubeconfig/admin", a.kubeconfigBreakGlass)
	g.POST("/tenants/:tenant/kubernetes/credential", a.kubernetesCredential)
}

// talosParams reads and checks the tenant and name of a Talos route.
func (a *API) talosParams(c echo.Context, withName bool) (tenant, name string, err error) {
	tenant, name = c.Param("tenant"), c.Param("name")
	causes := domain.ValidateName(tenant, "metadata.tenant")
	if withName {
		causes = append(causes, domain.ValidateName(name, "metadata.name")...)
	}
	if q := c.QueryParam("diff"); q != "" {
		causes = append(causes, domain.ValidateName(q, "diff")...)
	}
	if causes != nil {
		return "", "", domain.NewBadRequest("invalid name in the URL", causes...)
	}
	return tenant, name, a.readBarrier(c.Request().Context())
}

func pendingOf(c echo.Context) *talos.Pending {
	if d := c.QueryParam("diff"); d != "" {
		return &talos.Pending{Name: d}
	}
	return nil
}

// headerLeftOut names, in a redacted config's answer, the secrets left out.
const headerLeftOut = "X-Rezus-Secrets-Left-Out"

// configOptions reads what a config download may hold. The tenant's keys,
// tokens and secrets (the cluster, etcd, OS, service-account and aggregator
// CA keys: whoever holds them mints system:masters for years) are left out
// unless a global admin asks for them with ?includeSecrets=true; a tenant
// admin by binding, an editor or anyone else asking is refused (403). The
// read with secrets is audited as its own kind.
func (a *API) configOptions(c echo.Context, tenant, name string) (talos.ConfigOptions, error) {
	opts := talos.ConfigOptions{Pending: pendingOf(c)}
	switch q := c.QueryParam("includeSecrets"); q {
	case "", "false":
		a.AuditCredentialDownload(c, CredentialMachineConfig, tenant, name)
		return opts, nil
	case "true":
		a.AuditCredentialDownload(c, CredentialMachineConfigSecrets, tenant, name)
		if accessOf(c).Global() != domain.RoleAdmin {
			return opts, domain.NewForbidden(CredentialMachineConfig, name,
				"a config with the tenant's keys and tokens is for global admins; without includeSecrets it comes with them left out")
		}
		opts.IncludeSecrets = true
		return opts, nil
	default:
		return opts, domain.NewBadRequest("includeSecrets must be true or false",
			domain.Cause{Field: "includeSecrets", Type: domain.CauseInvalid, Message: "must be true or false"})
	}
}

func (a *API) answerConfig(c echo.Context, rc *talos.RenderedConfig, err error) error {
	if err != nil {
		return err
	}
	ct := "text/yaml; charset=utf-8"
	if pendingOf(c) != nil {
		ct = "text/x-diff; charset=utf-8"
	}
	if len(rc.LeftOut) > 0 {
		c.Response().Header().Set(headerLeftOut, strings.Join(rc.LeftOut, ", "))
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, ct, rc.Body)
}

// machineConfig serves GET /tenants/{t}/machines/{m}/config.
func (a *API) machineConfig(c echo.Context) error {
	tenant, name, err := a.talosParams(c, true)
	if err != nil {
		return err
	}
	opts, err := a.configOptions(c, tenant, name)
	if err != nil {
		return err
	}
	rc, err := a.talos.MachineConfig(c.Request().Context(), tenant, name, opts)
	return a.answerConfig(c, rc, err)
}

// nodeGroupConfig serves GET /tenants/{t}/nodegroups/{ng}/config: the group's template.
func (a *API) nodeGroupConfig(c echo.Context) error {
	tenant, name, err := a.talosParams(c, true)
	if err != nil {
		return err
	}
	opts, err := a.configOptions(c, tenant, name)
	if err != nil {
		return err
	}
	rc, err := a.talos.NodeGroupConfig(c.Request().Context(), tenant, name, opts)
	return a.answerConfig(c, rc, err)
}

// callerTenantRole is the caller's role on the tenant now; a caller with
// none is answered 404, as the routes under a tenant do.
func (a *API) callerTenantRole(c echo.Context, tenant string) (string, error) {
	r := a.tenantRole(accessOf(c), tenant)
	if domain.RoleRank(r) == 0 {
		return "", domain.NewNotFound(domain.TenantKind.Kind, tenant)
	}
	return r, nil
}

// talosconfig serves GET /tenants/{t}/talosconfig: a client certificate
// valid for CredentialTTL with the Talos role of the caller's role on the
// tenant (talos.TalosRoleFor: global admins os:admin, everyone else
// os:reader); the download is recorded.
func (a *API) talosconfig(c echo.Context) error {
	tenant, _, err := a.talosParams(c, false)
	if err != nil {
		return err
	}
	a.AuditCredentialDownload(c, CredentialTalosconfig, tenant, "")
	r, err := a.callerTenantRole(c, tenant)
	if err != nil {
		return err
	}
	tr, _ := talos.TalosRoleFor(r, accessOf(c).Global() == domain.RoleAdmin)
	body, notAfter, err := a.talos.UserTalosconfig(c.Request().Context(), tenant, tr, a.cfg.CredentialTTL)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Content-Disposition", `attachment; filename="talosconfig"`)
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().Header().Set("X-Rezus-Credential-Expires", notAfter.UTC().Format(time.RFC3339))
	c.Response().Header().Set("X-Rezus-Talos-Role", string(tr))
	return c.Blob(http.StatusOK, "application/yaml", body)
}

// ExecCommand is the credential plugin the kubeconfig names: rezusctl,
// which writes its own path and context in when it saves the file.
const ExecCommand = "rezusctl"

// kubeconfig serves GET /tenants/{t}/kubeconfig: a kubeconfig without a key
// whose user runs `rezusctl credential kubernetes -t T`, which asks for a
// short-lived certificate of the caller at each use (POST
// …/kubernetes/credential). The download is recorded.
func (a *API) kubeconfig(c echo.Context) error {
	tenant, _, err := a.talosParams(c, false)
	if err != nil {
		return err
	}
	a.AuditCredentialDownload(c, CredentialKubeconfig, tenant, "")
	if _, err := a.callerTenantRole(c, tenant); err != nil {
		return err
	}
	body, err := a.talos.ExecKubeconfig(c.Request().Context(), tenant, identityOf(c).Name,
		talos.ExecPlugin{Command: ExecCommand, Args: []string{"credential", "kubernetes", "--tenant", tenant}})
	if err != nil {
		return err
	}
	c.Response().Header().Set("Content-Disposition", `attachment; filename="kubeconfig"`)
	return c.Blob(http.StatusOK, "application/yaml", body)
}

// kubeconfigBreakGlass serves GET /tenants/{t}/kubeconfig/admin: the
// long-lived system:masters kubeconfig, for global admins only (a tenant
// admin binding is not enough), recorded as a break-glass download.
func (a *API) kubeconfigBreakGlass(c echo.Context) error {
	tenant, _, err := a.talosParams(c, false)
	if err != nil {
		return err
	}
	a.AuditCredentialDownload(c, CredentialKubeconfigBreakGlass, tenant, "")
	if accessOf(c).Global() != domain.RoleAdmin {
		return domain.NewForbidden("Kubeconfig", tenant, "the break-glass kubeconfig (system:masters, valid a year) is for global admins; use the kubeconfig of your own role")
	}
	body, err := a.talos.Kubeconfig(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Content-Disposition", `attachment; filename="kubeconfig"`)
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "application/yaml", body)
}

// execCredential is client.authentication.k8s.io/v1 ExecCredential, what a
// kubeconfig's exec plugin prints.
type execCredential struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Status     execCredentialStatus `json:"status"`
}

type execCredentialStatus struct {
	ExpirationTimestamp   time.Time `json:"expirationTimestamp"`
	ClientCertificateData string    `json:"clientCertificateData"`
	ClientKeyData         string    `json:"clientKeyData"`
}

// kubernetesCredential serves POST /tenants/{t}/kubernetes/credential: a
// client certificate of the tenant's cluster for the caller (CN the user,
// O the group of the caller's role on the tenant now and its identity
// provider's groups, prefixed), valid for
// CredentialTTL, as an ExecCredential. A caller without a role on the tenant
// is refused (404). Each issuance is recorded. The cluster's bindings of
// the groups are made sure of first (a failure is logged: the certificate
// works once they are there).
func (a *API) kubernetesCredential(c echo.Context) error {
	tenant, _, err := a.talosParams(c, false)
	if err != nil {
		return err
	}
	id := identityOf(c)
	user := id.Name
	a.AuditCredentialDownload(c, CredentialKubernetes, tenant, user)
	r, err := a.callerTenantRole(c, tenant)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if a.kubeAccess != nil {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := a.kubeAccess.EnsureAccessRBAC(rctx, tenant); err != nil {
			a.log.Warn("the cluster's access bindings could not be made sure of; issuing the credential anyway", "tenant", tenant, "err", err)
		}
		cancel()
	}
	cred, err := a.talos.UserKubernetesCredential(ctx, tenant, user, talos.KubeGroups(r, id.Groups), a.cfg.CredentialTTL)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, execCredential{APIVersion: "client.authentication.k8s.io/v1", Kind: "ExecCredential",
		Status: execCredentialStatus{ExpirationTimestamp: cred.NotAfter.UTC().Truncate(time.Second),
			ClientCertificateData: string(cred.Cert), ClientKeyData: string(cred.Key)}})
}

// configPatchHooks reject a ConfigPatch that machinery cannot load or apply
// before anything is stored, with machinery's reason on spec.patch.
type configPatchHooks struct{ a *API }

func (h *configPatchHooks) admit(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error) {
	if h.a.talos == nil || (op != domain.OpCreate && op != domain.OpUpdate) || len(obj.Spec) == 0 {
		return nil, nil
	}
	name := ref.Name
	if name == "" {
		name = obj.Metadata.Name
	}
	return nil, h.check(c, ref.Tenant, name, obj.Spec)
}

func (h *configPatchHooks) admitPatch(c echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error) {
	if h.a.talos == nil {
		return nil, nil
	}
	spec, ok := patch["spec"]
	if !ok {
		return nil, nil
	}
	cur, found := h.a.cache.GetObject(ref)
	if !found {
		return nil, nil // the patch answers NotFound itself
	}
	specPatch, err := json.Marshal(spec)
	if err != nil {
		return nil, nil
	}
	merged, err := mergePatch(cur.Spec, specPatch)
	if err != nil {
		return nil, nil // the merge reports it
	}
	return nil, h.check(c, ref.Tenant, ref.Name, merged)
}

// check validates the spec's patch text; a spec the domain rejects anyway is
// left to the generic path, which lists every bad field.
func (h *configPatchHooks) check(c echo.Context, tenant, name string, raw json.RawMessage) error {
	var spec domain.ConfigPatchSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil
	}
	spec.Default()
	if causes := spec.Validate("spec"); len(causes) > 0 {
		return nil
	}
	reason, err := h.a.talos.ValidatePatch(c.Request().Context(), tenant, spec)
	if err != nil {
		if domain.IsNotFound(err) {
			return nil // the tenant's absence is reported by the write
		}
		return err
	}
	if reason != "" {
		return domain.NewInvalid(domain.ConfigPatchKind.Kind, name, []domain.Cause{{Field: "spec.patch", Type: domain.CauseInvalid, Message: reason}})
	}
	return nil
}

func (h *configPatchHooks) visible(echo.Context, []byte) bool { return true }
