package webui

import (
	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// tenantOpsRoutes serves a tenant's config patches, applies (with their logs),
// upgrades and etcd backups.
func (u *UI) tenantOpsRoutes(p *pages) {
	u.patchRoutes(p)
	u.applyRoutes(p)
	u.upgradeRoutes(p)
	u.rotationRoutes(p)
	u.backupRoutes(p)
}

// tenantOpsPanels are the tenant page's sections for config patches, applies
// and upgrades, rendered once with the page; each holds an element with
// sse-swap set to one of tenantOpsFragments' events.
func (u *UI) tenantOpsPanels(c echo.Context, tenant string) (patches, applies, upgrades, backups, remediations templ.Component, err error) {
	v := viewerOf(c)
	patchRows, err := u.patchRows(c, tenant)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	applyRows, err := u.applyRows(c, tenant)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	upgradeRows, err := u.upgradeRows(c, tenant)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	backupRows, err := u.backupRows(c, tenant)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	remediationRows, err := u.remediationRows(c, tenant)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	var form *versionForm
	if v.CanWriteTenant(tenant) {
		f, err := u.newVersionForm(c, tenant)
		if err != nil {
			return nil, nil, nil, nil, nil, err
		}
		form = &f
	}
	return patchesPanel(v, tenant, patchRows), appliesPanel(applyRows), upgradesPanel(v, tenant, upgradeRows, form),
		backupsPanel(v, tenant, backupRows), remediationsPanel(remediationRows), nil
}

// tenantOpsFragments are the live parts of those sections, for the tenant
// page's live stream (events "patches", "applies", "upgrades").
func (u *UI) tenantOpsFragments(tenant string) []fragment {
	return []fragment{
		goneOnNotFound(tenant, fragment{Event: "patches", Render: func(c echo.Context) (templ.Component, error) { return u.patchRows(c, tenant) }}),
		goneOnNotFound(tenant, fragment{Event: "applies", Render: func(c echo.Context) (templ.Component, error) { return u.applyRows(c, tenant) }}),
		goneOnNotFound(tenant, fragment{Event: "upgrades", Render: func(c echo.Context) (templ.Component, error) { return u.upgradeRows(c, tenant) }}),
		goneOnNotFound(tenant, fragment{Event: "backups", Render: func(c echo.Context) (templ.Component, error) { return u.backupRows(c, tenant) }}),
		goneOnNotFound(tenant, fragment{Event: "remediations", Render: func(c echo.Context) (templ.Component, error) { return u.remediationRows(c, tenant) }}),
	}
}

// goneOnNotFound makes a tenant page's part say the tenant is gone (and end
// a live stream) when reading it answers NotFound — the tenant deleted, or
// taken out of the user's view between two reads of one render — instead
// of showing an error in each part of a page that is going.
func goneOnNotFound(tenant string, f fragment) fragment {
	render := f.Render
	f.Render = func(c echo.Context) (templ.Component, error) {
		comp, err := render(c)
		if domain.ReasonOf(err) == domain.ReasonNotFound {
			return tenantGone(tenant), &liveEnd{Message: goneMessage("Tenant " + tenant)}
		}
		return comp, err
	}
	return f
}
