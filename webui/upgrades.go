package webui

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// upgradeRoutes serve starting and canceling a tenant's rolling Talos
// upgrades; their progress is the tenant page's live "upgrades" fragment.
func (u *UI) upgradeRoutes(p *pages) {
	p.POST("/tenants/:tenant/upgrades", u.createUpgrade)
	p.POST("/tenants/:tenant/upgrades/:name/cancel", u.cancelUpgrade)
}

// upgradeForm is the start form's values, choices and the API's refusal.
type upgradeForm struct {
	Tenant       string
	TalosVersion string
	// Current is the tenant's Talos version, shown as the placeholder.
	Current string
	// NodeGroups are the tenant's groups to choose from; Selected the chosen.
	NodeGroups     []string
	Selected       map[string]bool
	MaxParallelism string
	Errors         formErrors
	// Started names the upgrade just created, for a confirmation.
	Started string
}

// upgradeFormFields are the form's fields as the API names them in causes.
var upgradeFormFields = []string{"metadata.name", "spec.talosVersion", "spec.nodeGroups", "spec.maxParallelism"}

// newUpgradeForm is an empty start form with the tenant's choices.
func (u *UI) newUpgradeForm(c echo.Context, tenant string) (upgradeForm, error) {
	t, err := getOf[domain.Tenant](u, c.Request(), "/tenants/"+tenant)
	if err != nil {
		return upgradeForm{}, err
	}
	ngs, err := listOf[domain.NodeGroup](u, c.Request(), "/tenants/"+tenant+"/nodegroups")
	if err != nil {
		return upgradeForm{}, err
	}
	f := upgradeForm{Tenant: tenant, Current: t.Spec.TalosVersion, Selected: map[string]bool{}}
	for _, ng := range ngs {
		f.NodeGroups = append(f.NodeGroups, ng.Metadata.Name)
	}
	sort.Strings(f.NodeGroups)
	return f, nil
}

// upgradeRows is the live table of the tenant's newest upgrades with their
// machines' progress.
func (u *UI) upgradeRows(c echo.Context, tenant string) (templ.Component, error) {
	us, err := u.recentUpgrades(c.Request(), tenant)
	if err != nil {
		return nil, err
	}
	return upgradeTable(viewerOf(c), us), nil
}

// createUpgrade starts an upgrade named for the time it was asked for.
func (u *UI) createUpgrade(c echo.Context) error {
	t := c.Param("tenant")
	f, err := u.newUpgradeForm(c, t)
	if err != nil {
		return u.fail(c, err)
	}
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, domain.NewBadRequest("reading the form: "+err.Error()))
	}
	f.TalosVersion = strings.TrimSpace(form.Get("talosVersion"))
	f.MaxParallelism = strings.TrimSpace(form.Get("maxParallelism"))
	var groups []string
	for _, g := range form["nodeGroups"] {
		if g = strings.TrimSpace(g); g != "" && !f.Selected[g] {
			f.Selected[g] = true
			groups = append(groups, g)
		}
	}
	sort.Strings(groups)
	spec := map[string]any{"talosVersion": f.TalosVersion}
	if len(groups) > 0 {
		spec["nodeGroups"] = groups
	}
	if f.MaxParallelism != "" {
		mp, err := strconv.Atoi(f.MaxParallelism)
		if err != nil {
			return u.upgradeRefused(c, f, domain.NewInvalid(domain.UpgradeKind.Kind, "", []domain.Cause{{Field: "spec.maxParallelism",
				Type: domain.CauseInvalid, Message: "must be a whole number"}}))
		}
		spec["maxParallelism"] = mp
	}
	base := "upgrade-" + u.now().UTC().Format("20060102-150405")
	for i := 1; ; i++ {
		name := base
		if i > 1 {
			name += "-" + strconv.Itoa(i)
		}
		obj := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.UpgradeKind.Kind,
			"metadata": map[string]any{"name": name}, "spec": spec}
		err = u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/tenants/" + t + "/upgrades", Body: obj}, nil)
		if domain.IsAlreadyExists(err) && i < 5 {
			continue
		}
		if err != nil {
			return u.upgradeRefused(c, f, err)
		}
		if !isHTMX(c) {
			return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+t+"#upgrades")
		}
		done := upgradeForm{Tenant: t, Current: f.Current, NodeGroups: f.NodeGroups, Selected: map[string]bool{},
			Started: name + " to " + f.TalosVersion}
		return render(c, http.StatusCreated, upgradeStartForm(viewerOf(c), done))
	}
}

// upgradeRefused shows causes and conflicts on the form, other refusals
// (403, a missing tenant) as errors.
func (u *UI) upgradeRefused(c echo.Context, f upgradeForm, err error) error {
	switch domain.ReasonOf(err) {
	case domain.ReasonInvalid, domain.ReasonBadRequest, domain.ReasonConflict, domain.ReasonAlreadyExists:
		f.Errors = toFormErrors(err, upgradeFormFields...)
		if isHTMX(c) {
			return render(c, errorCode(err), upgradeStartForm(viewerOf(c), f))
		}
		return render(c, errorCode(err), UpgradeFormPage(u, viewerOf(c), f))
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
