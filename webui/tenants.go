package webui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (u *UI) tenantListRoutes(p *pages) {
	p.GET("/tenants", u.tenantList)
	p.GET("/live/tenants", u.tenantListLive)
	p.POST("/tenants", u.createTenant)
	p.DELETE("/tenants/:tenant", u.deleteTenant)
}

// tenantForm is the create form's values and the API's refusal.
type tenantForm struct {
	Name, Labels, TalosVersion, KubernetesVersion string
	Provider                                      string
	ControlPlanes, Workers                        string
	// ProviderConfig is the first node groups' providerConfig.
	ProviderConfig providerConfigForm
	Errors         formErrors
}

// tenantFormFields are the form's fields as the API names them in causes.
var tenantFormFields = []string{"metadata.name", "metadata.labels", "spec.talosVersion", "spec.kubernetesVersion",
	"spec.controlPlane", "spec.network", "provider", "controlPlanes", "workers"}

func (u *UI) tenantRows(c echo.Context) (templ.Component, error) {
	sel := c.QueryParam("labelSelector")
	ts, err := listOf[domain.Tenant](u, c.Request(), "/tenants"+query("labelSelector", sel))
	if err != nil {
		return nil, err
	}
	return tenantTable(viewerOf(c), ts), nil
}

func (u *UI) tenantList(c echo.Context) error {
	v := viewerOf(c)
	parts, seen, err := renderFragments(c, []fragment{{Event: "tenants", Render: u.tenantRows}})
	if err != nil {
		if domain.ReasonOf(err) == domain.ReasonBadRequest && isHTMX(c) {
			return render(c, http.StatusBadRequest, Flash("error", errorMessage(err)))
		}
		return u.fail(c, err)
	}
	rows := parts[0]
	if isHTMX(c) && c.Request().Header.Get("HX-Target") == "tenant-rows" {
		return render(c, http.StatusOK, rows)
	}
	providers, _ := listOf[domain.Object](u, c.Request(), "/providers")
	form := tenantForm{ControlPlanes: "1", Workers: "2"}
	if len(providers) > 0 {
		form.Provider = providers[0].Metadata.Name
	}
	form.ProviderConfig, _ = u.newProviderConfigForm(c.Request(), form.Provider, nil)
	return render(c, http.StatusOK, TenantsPage(u, v, c.QueryParam("labelSelector"), seen, rows, form, providerNames(providers)))
}

func (u *UI) tenantListLive(c echo.Context) error {
	return u.live(c, []string{domain.SubjectFilter(domain.TenantKind, "", "")}, fragment{Event: "tenants", Render: u.tenantRows})
}

// anyTenantWritable reports whether the viewer may change any of the tenants
// listed (the table then has an actions column).
func anyTenantWritable(v viewer, ts []domain.Tenant) bool {
	for _, t := range ts {
		if v.CanWriteTenant(t.Metadata.Name) {
			return true
		}
	}
	return false
}

func providerNames(ps []domain.Object) []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Metadata.Name
	}
	return names
}

// createTenant creates the tenant and, when a provider is chosen, its first
// node groups ("controlplane" and "workers"), then opens the tenant's page.
func (u *UI) createTenant(c echo.Context) error {
	v := viewerOf(c)
	f := tenantForm{
		Name: strings.TrimSpace(c.FormValue("metadata.name")), Labels: strings.TrimSpace(c.FormValue("metadata.labels")),
		TalosVersion: strings.TrimSpace(c.FormValue("spec.talosVersion")), KubernetesVersion: strings.TrimSpace(c.FormValue("spec.kubernetesVersion")),
		Provider: strings.TrimSpace(c.FormValue("provider")), ControlPlanes: strings.TrimSpace(c.FormValue("controlPlanes")),
		Workers: strings.TrimSpace(c.FormValue("workers")),
	}
	providers, _ := listOf[domain.Object](u, c.Request(), "/providers")
	params, _ := c.FormParams()
	pcForm, provider := u.newProviderConfigForm(c.Request(), f.Provider, params)
	again := func(err error) error {
		f.Errors = toFormErrors(err, append(pcForm.FieldNames(), tenantFormFields...)...)
		f.ProviderConfig, f.ProviderConfig.Errors = pcForm, f.Errors
		return render(c, errorCode(err), tenantCreateForm(v, f, providerNames(providers)))
	}
	labels, lerr := parseLabels(f.Labels)
	var causes []domain.Cause
	if lerr != nil {
		causes = append(causes, domain.Cause{Field: "metadata.labels", Type: domain.CauseInvalid, Message: lerr.Error()})
	}
	cps, cpErr := optionalCount(f.ControlPlanes)
	if cpErr != nil {
		causes = append(causes, domain.Cause{Field: "controlPlanes", Type: domain.CauseInvalid, Message: cpErr.Error()})
	}
	workers, wErr := optionalCount(f.Workers)
	if wErr != nil {
		causes = append(causes, domain.Cause{Field: "workers", Type: domain.CauseInvalid, Message: wErr.Error()})
	}
	var providerConfig json.RawMessage
	if f.Provider != "" {
		// The groups' providerConfig, checked as the API will check it.
		var pcCauses []domain.Cause
		providerConfig, pcCauses = pcForm.check(provider, domain.RoleControlPlane)
		causes = append(causes, pcCauses...)
	}
	if f.Provider != "" && cpErr == nil && wErr == nil {
		// Check the groups before the tenant exists, so a bad count does not
		// leave a tenant without its node groups behind.
		if cps == 0 {
			causes = append(causes, domain.Cause{Field: "controlPlanes", Type: domain.CauseInvalid, Message: "a cluster needs at least one control-plane machine"})
		}
		for _, g := range []struct {
			field, role string
			count       int
		}{{"controlPlanes", domain.RoleControlPlane, cps}, {"workers", domain.RoleWorker, workers}} {
			spec := domain.NodeGroupSpec{Role: g.role, Count: g.count, Provider: f.Provider}
			spec.Default()
			for _, cause := range spec.Validate("spec") {
				if cause.Field == "spec.count" && g.count > 0 {
					causes = append(causes, domain.Cause{Field: g.field, Type: cause.Type, Message: cause.Message})
				}
			}
		}
	}
	if len(causes) > 0 {
		return again(domain.NewInvalid(domain.TenantKind.Kind, f.Name, causes))
	}
	spec := map[string]any{}
	if f.TalosVersion != "" {
		spec["talosVersion"] = f.TalosVersion
	}
	if f.KubernetesVersion != "" {
		spec["kubernetesVersion"] = f.KubernetesVersion
	}
	tenant := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.TenantKind.Kind,
		"metadata": map[string]any{"name": f.Name, "labels": labels}, "spec": spec}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/tenants", Body: tenant}, nil); err != nil {
		return again(err)
	}
	if f.Provider != "" {
		groups := []struct {
			name, role, field string
			count             int
		}{{"controlplane", domain.RoleControlPlane, "controlPlanes", cps}, {"workers", domain.RoleWorker, "workers", workers}}
		for _, g := range groups {
			if g.count == 0 {
				continue
			}
			ng := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.NodeGroupKind.Kind,
				"metadata": map[string]any{"name": g.name, "tenant": f.Name},
				"spec":     map[string]any{"role": g.role, "count": g.count, "provider": f.Provider}}
			if providerConfig != nil {
				ng["spec"].(map[string]any)["providerConfig"] = providerConfig
			}
			if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/tenants/" + f.Name + "/nodegroups", Body: ng}, nil); err != nil {
				err = domain.NewInvalid(domain.NodeGroupKind.Kind, g.name, []domain.Cause{{Field: g.field,
					Message: fmt.Sprintf("the tenant was created, but its %s node group was not: %s", g.name, errorMessage(err))}})
				return again(err)
			}
		}
	}
	c.Response().Header().Set("HX-Redirect", "/ui/tenants/"+f.Name)
	return c.NoContent(http.StatusCreated)
}

func optionalCount(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > domain.MaxNodeGroupCount {
		return 0, fmt.Errorf("must be a whole number from 0 to %d", domain.MaxNodeGroupCount)
	}
	return n, nil
}

// parseLabels reads "k=v, k2=v2"; the API validates keys and values.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return out, nil
}

// deleteTenant asks the API to delete the tenant (its infrastructure is
// destroyed first); the row shows Deleting until it is gone.
func (u *UI) deleteTenant(c echo.Context) error {
	t := c.Param("tenant")
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodDelete, Path: "/tenants/" + t}, nil); err != nil {
		return u.fail(c, err)
	}
	if c.Request().Header.Get("HX-Target") == "" || c.QueryParam("redirect") != "" {
		c.Response().Header().Set("HX-Redirect", "/ui/tenants")
		return c.NoContent(http.StatusAccepted)
	}
	return render(c, http.StatusOK, Flash("ok", "Deletion of tenant "+t+" requested: its infrastructure is being destroyed."))
}
