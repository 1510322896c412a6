package handlers

import (
	"encoding/json"
	"net/http"

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

func (a *API) answerConfig(c echo.Context, body []byte, err error) error {
	if err != nil {
		return err
	}
	ct := "text/yaml; charset=utf-8"
	if pendingOf(c) != nil {
		ct = "text/x-diff; charset=utf-8"
	}
	return c.Blob(http.StatusOK, ct, body)
}

// machineConfig serves GET /tenants/{t}/machines/{m}/config.
func (a *API) machineConfig(c echo.Context) error {
	tenant, name, err := a.talosParams(c, true)
	if err != nil {
		return err
	}
	a.AuditCredentialDownload(c, CredentialMachineConfig, tenant, name)
	body, err := a.talos.MachineConfig(c.Request().Context(), tenant, name, pendingOf(c))
	return a.answerConfig(c, body, err)
}

// nodeGroupConfig serves GET /tenants/{t}/nodegroups/{ng}/config: the group's template.
func (a *API) nodeGroupConfig(c echo.Context) error {
	tenant, name, err := a.talosParams(c, true)
	if err != nil {
		return err
	}
	a.AuditCredentialDownload(c, CredentialMachineConfig, tenant, name)
	body, err := a.talos.NodeGroupConfig(c.Request().Context(), tenant, name, pendingOf(c))
	return a.answerConfig(c, body, err)
}

// talosconfig serves GET /tenants/{t}/talosconfig and records the download.
func (a *API) talosconfig(c echo.Context) error {
	tenant, _, err := a.talosParams(c, false)
	if err != nil {
		return err
	}
	a.AuditCredentialDownload(c, CredentialTalosconfig, tenant, "")
	body, err := a.talos.Talosconfig(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Content-Disposition", `attachment; filename="talosconfig"`)
	return c.Blob(http.StatusOK, "application/yaml", body)
}

// kubeconfig serves GET /tenants/{t}/kubeconfig and records the download.
func (a *API) kubeconfig(c echo.Context) error {
	tenant, _, err := a.talosParams(c, false)
	if err != nil {
		return err
	}
	a.AuditCredentialDownload(c, CredentialKubeconfig, tenant, "")
	body, err := a.talos.Kubeconfig(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Content-Disposition", `attachment; filename="kubeconfig"`)
	return c.Blob(http.StatusOK, "application/yaml", body)
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
