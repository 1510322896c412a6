package webui

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// upgradeRoutes serve changing a tenant's declared versions (the upgrade
// saga then queues the runs) and canceling a run; the runs' progress is the
// tenant page's live "upgrades" fragment.
func (u *UI) upgradeRoutes(p *pages) {
	p.POST("/tenants/:tenant/versions", u.changeVersion)
	p.POST("/tenants/:tenant/upgrades/:name/cancel", u.cancelUpgrade)
}

// versionForm is the tenant's declared versions, what was typed, and the
// API's refusal: the Upgrade button changes the declared Talos version, the
// one beside it the declared Kubernetes version.
type versionForm struct {
	Tenant string
	// TalosVersion and KubernetesVersion are what was typed, kept on a refusal.
	TalosVersion, KubernetesVersion string
	// DeclaredTalos and DeclaredKubernetes are the tenant's spec;
	// RunningKubernetes its status.kubernetesVersion, what the machines'
	// configs carry.
	DeclaredTalos, DeclaredKubernetes, RunningKubernetes string
	Errors                                               formErrors
	// Changed says what the last submit did, for a confirmation.
	Changed string
}

// versionFields are the forms' fields as the API names them in causes.
var versionFields = []string{"spec.talosVersion", "spec.kubernetesVersion"}

// newVersionForm is the forms with the tenant's declared versions.
func (u *UI) newVersionForm(c echo.Context, tenant string) (versionForm, error) {
	t, err := getOf[domain.Tenant](u, c.Request(), "/tenants/"+tenant)
	if err != nil {
		return versionForm{}, err
	}
	return versionFormOf(*t), nil
}

func versionFormOf(t domain.Tenant) versionForm {
	return versionForm{Tenant: t.Metadata.Name, DeclaredTalos: t.Spec.TalosVersion,
		DeclaredKubernetes: t.Spec.KubernetesVersion, RunningKubernetes: t.Status.KubernetesVersion}
}

// upgradeRows is the live table of the tenant's newest upgrades with their
// machines' progress.
func (u *UI) upgradeRows(c echo.Context, tenant string) (templ.Component, error) {
	us, err := u.recentUpgrades(c.Request(), tenant)
	if err != nil {
		return nil, err
	}
	return upgradeTable(viewerOf(c), tenant, us), nil
}

// changeVersion declares a new Talos or Kubernetes version for the tenant (a
// merge patch of its spec, whichever field the form sent). The API checks the
// version rules (422 with the field's cause); the upgrade saga sees the
// change and queues the run, whose progress the live table shows.
func (u *UI) changeVersion(c echo.Context) error {
	t := c.Param("tenant")
	f, err := u.newVersionForm(c, t)
	if err != nil {
		return u.fail(c, err)
	}
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, domain.NewBadRequest("reading the form: "+err.Error()))
	}
	field, what, declared := "talosVersion", "Talos", f.DeclaredTalos
	switch {
	case form.Has("talosVersion") == form.Has("kubernetesVersion"):
		return u.fail(c, domain.NewBadRequest("give either talosVersion or kubernetesVersion"))
	case form.Has("kubernetesVersion"):
		field, what, declared = "kubernetesVersion", "Kubernetes", f.DeclaredKubernetes
	}
	version := strings.TrimSpace(form.Get(field))
	if field == "talosVersion" {
		f.TalosVersion = version
	} else {
		f.KubernetesVersion = version
	}
	if version == "" {
		return u.versionRefused(c, f, domain.NewInvalid(domain.TenantKind.Kind, t, []domain.Cause{{Field: "spec." + field,
			Type: domain.CauseRequired, Message: "give the version to declare, e.g. " + declared}}))
	}
	var updated domain.Tenant
	patch := map[string]any{"spec": map[string]any{field: version}}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPatch, Path: "/tenants/" + t, Body: patch,
		ContentType: "application/merge-patch+json"}, &updated); err != nil {
		return u.versionRefused(c, f, err)
	}
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+t+"#upgrades")
	}
	done := versionFormOf(updated)
	now := done.DeclaredTalos
	if field == "kubernetesVersion" {
		now = done.DeclaredKubernetes
	}
	if now == declared {
		done.Changed = fmt.Sprintf("%s already declares %s %s: nothing to upgrade.", t, what, now)
	} else {
		done.Changed = fmt.Sprintf("%s now declares %s %s (was %s): its upgrade is queued and shows above as it runs.", t, what, now, declared)
	}
	return render(c, http.StatusOK, versionForms(viewerOf(c), done))
}

// versionRefused shows causes and conflicts on the forms, other refusals
// (403, a missing tenant) as errors.
func (u *UI) versionRefused(c echo.Context, f versionForm, err error) error {
	switch domain.ReasonOf(err) {
	case domain.ReasonInvalid, domain.ReasonBadRequest, domain.ReasonConflict:
		f.Errors = toFormErrors(err, versionFields...)
		if isHTMX(c) {
			return render(c, errorCode(err), versionForms(viewerOf(c), f))
		}
		return render(c, errorCode(err), VersionFormPage(u, viewerOf(c), f))
	}
	return u.fail(c, err)
}

// cancelUpgrade asks the saga to stop the run after the machine it is
// upgrading and answers the fresh table.
func (u *UI) cancelUpgrade(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost,
		Path: "/tenants/" + t + "/upgrades/" + url.PathEscape(name) + "/cancel"}, nil); err != nil {
		return u.fail(c, err)
	}
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+t+"#upgrades")
	}
	rows, err := u.upgradeRows(c, t)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, rows)
}

// upgradeStepClass colours a machine's step like a run's phase (Done is a success).
func upgradeStepClass(phase string) string {
	if phase == domain.StepDone {
		return phaseClass(domain.UpgradeSucceeded)
	}
	return phaseClass(phase)
}

// upgradeTarget names what a run moves to: "Talos v1.13.1", "Kubernetes
// v1.36.1", or what it rotates: "Rotate talos-ca, kubernetes-ca".
func upgradeTarget(up domain.Upgrade) string {
	if up.Spec.Rotation() {
		return "Rotate " + strings.Join(up.Spec.Rotate, ", ")
	}
	if up.Spec.Kubernetes() {
		return "Kubernetes " + up.Spec.KubernetesVersion
	}
	return "Talos " + up.Spec.TalosVersion
}
