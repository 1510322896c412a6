package webui

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// tenantSpecRoutes serve editing a tenant's spec and labels.
func (u *UI) tenantSpecRoutes(p *pages) {
	p.GET("/tenants/:tenant/edit", u.editTenantPage)
	p.POST("/tenants/:tenant/spec", u.updateTenantSpec)
}

// tenantSpecForm is the tenant edit form's values and the API's refusal.
// Lists (subnets) and labels are written comma-separated.
type tenantSpecForm struct {
	Tenant string
	// ResourceVersion is the version the form was filled from: a save after
	// another change is refused with a conflict instead of undoing it.
	ResourceVersion                 string
	TalosVersion, KubernetesVersion string
	Endpoint                        string
	PodSubnets, ServiceSubnets      string
	DNSDomain, Labels               string
	// Extensions (one a line) and KernelArgs make the tenant's schematic,
	// the default of its node groups that declare none.
	Extensions, KernelArgs string
	// DeclaredTalos and DeclaredKubernetes are the versions the tenant
	// declared when the form was filled, for the note on upgrades.
	DeclaredTalos, DeclaredKubernetes string
	Errors                            formErrors
	// Impact is what the edit would do, shown when asked before the Save.
	Impact *impactShown
}

// tenantSpecFields are the form's fields as the API names them in causes.
var tenantSpecFields = []string{"spec.talosVersion", "spec.kubernetesVersion", "spec.controlPlane.endpoint",
	"spec.network.podSubnets", "spec.network.serviceSubnets", "spec.network.dnsDomain", "metadata.labels",
	"spec.schematic.extensions", "spec.schematic.extraKernelArgs", "spec.schematic", "metadata.resourceVersion"}

func tenantSpecFormOf(t *domain.Tenant) tenantSpecForm {
	exts, args := schematicStrings(t.Spec.Schematic)
	return tenantSpecForm{Extensions: exts, KernelArgs: args, Tenant: t.Metadata.Name, ResourceVersion: t.Metadata.ResourceVersion,
		TalosVersion: t.Spec.TalosVersion, KubernetesVersion: t.Spec.KubernetesVersion,
		Endpoint: t.Spec.ControlPlane.Endpoint, PodSubnets: strings.Join(t.Spec.Network.PodSubnets, ", "),
		ServiceSubnets: strings.Join(t.Spec.Network.ServiceSubnets, ", "), DNSDomain: t.Spec.Network.DNSDomain,
		Labels: labelString(t.Metadata.Labels), DeclaredTalos: t.Spec.TalosVersion, DeclaredKubernetes: t.Spec.KubernetesVersion}
}

func (u *UI) editTenantPage(c echo.Context) error {
	name := c.Param("tenant")
	if err := writerOf(c, name, domain.TenantKind.Kind, name, "its spec"); err != nil {
		return u.fail(c, err)
	}
	t, err := getOf[domain.Tenant](u, c.Request(), "/tenants/"+name)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, TenantEditPage(u, viewerOf(c), tenantSpecFormOf(t)))
}

// updateTenantSpec writes the form back with PUT and the resourceVersion it
// was read at, through the API: a changed version is picked up by the
// upgrade saga as from any other client.
func (u *UI) updateTenantSpec(c echo.Context) error {
	name := c.Param("tenant")
	path := "/tenants/" + name
	t, err := getOf[domain.Tenant](u, c.Request(), path)
	if err != nil {
		return u.fail(c, err)
	}
	f := tenantSpecForm{Tenant: name, ResourceVersion: strings.TrimSpace(c.FormValue("metadata.resourceVersion")),
		TalosVersion: strings.TrimSpace(c.FormValue("spec.talosVersion")), KubernetesVersion: strings.TrimSpace(c.FormValue("spec.kubernetesVersion")),
		Endpoint: strings.TrimSpace(c.FormValue("spec.controlPlane.endpoint")), PodSubnets: strings.TrimSpace(c.FormValue("spec.network.podSubnets")),
		ServiceSubnets: strings.TrimSpace(c.FormValue("spec.network.serviceSubnets")), DNSDomain: strings.TrimSpace(c.FormValue("spec.network.dnsDomain")),
		Labels: strings.TrimSpace(c.FormValue("metadata.labels")), DeclaredTalos: t.Spec.TalosVersion, DeclaredKubernetes: t.Spec.KubernetesVersion,
		Extensions: strings.TrimSpace(c.FormValue("spec.schematic.extensions")), KernelArgs: strings.TrimSpace(c.FormValue("spec.schematic.extraKernelArgs"))}
	again := func(err error) error {
		switch domain.ReasonOf(err) {
		case domain.ReasonInvalid, domain.ReasonBadRequest, domain.ReasonConflict:
		default:
			return u.fail(c, err)
		}
		f.Errors = toFormErrors(err, tenantSpecFields...)
		if domain.ReasonOf(err) == domain.ReasonConflict {
			f.Errors.Message += " (the tenant changed since this form was loaded; reload it to see the current values)"
		}
		if isHTMX(c) {
			return render(c, errorCode(err), tenantSpecFormView(viewerOf(c), f))
		}
		return render(c, errorCode(err), TenantEditPage(u, viewerOf(c), f))
	}
	labels, err := parseLabels(f.Labels)
	if err != nil {
		return again(domain.NewInvalid(domain.TenantKind.Kind, name, []domain.Cause{{Field: "metadata.labels", Type: domain.CauseInvalid, Message: err.Error()}}))
	}
	spec := t.Spec
	spec.TalosVersion, spec.KubernetesVersion = f.TalosVersion, f.KubernetesVersion
	spec.ControlPlane.Endpoint = f.Endpoint
	spec.Network.PodSubnets, spec.Network.ServiceSubnets = splitList(f.PodSubnets), splitList(f.ServiceSubnets)
	spec.Network.DNSDomain = f.DNSDomain
	spec.Schematic = schematicOf(t.Spec.Schematic, f.Extensions, f.KernelArgs)
	meta := t.Metadata
	meta.ResourceVersion, meta.Labels = f.ResourceVersion, labels
	obj := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.TenantKind.Kind, "metadata": meta, "spec": spec}
	if wantsImpact(c) {
		imp, err := u.dryRunImpact(c, http.MethodPut, path, obj)
		if err != nil {
			return again(err)
		}
		f.Impact = &imp
		if isHTMX(c) {
			return render(c, http.StatusOK, tenantSpecFormView(viewerOf(c), f))
		}
		return render(c, http.StatusOK, TenantEditPage(u, viewerOf(c), f))
	}
	var updated domain.Tenant
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPut, Path: path, Body: obj}, &updated); err != nil {
		return again(err)
	}
	// A version or schematic change queues an upgrade (a re-image of the
	// groups that follow the tenant's schematic): land where its progress shows.
	target := "/ui/tenants/" + name + "#tenant-overview"
	if updated.Spec.TalosVersion != t.Spec.TalosVersion || updated.Spec.KubernetesVersion != t.Spec.KubernetesVersion ||
		updated.Spec.Schematic.ID() != t.Spec.Schematic.ID() {
		target = "/ui/tenants/" + name + "#upgrades"
	}
	if isHTMX(c) {
		c.Response().Header().Set("HX-Redirect", target)
		return c.NoContent(http.StatusOK)
	}
	return c.Redirect(http.StatusSeeOther, target)
}

// splitList reads "a, b" as [a b]; empty parts are dropped, and an empty
// list is nil (the API fills the default in).
func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
