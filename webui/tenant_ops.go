package webui

import (
	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"
)

// tenantOpsRoutes serves a tenant's config patches, applies (with their logs)
// and upgrades.
func (u *UI) tenantOpsRoutes(p *pages) {}

// tenantOpsPanels are the tenant page's sections for config patches, applies
// and upgrades, rendered once with the page; each holds an element with
// sse-swap set to one of tenantOpsFragments' events.
func (u *UI) tenantOpsPanels(c echo.Context, tenant string) (patches, applies, upgrades templ.Component, err error) {
	return templ.NopComponent, templ.NopComponent, templ.NopComponent, nil
}

// tenantOpsFragments are the live parts of those sections, for the tenant
// page's live stream (events "patches", "applies", "upgrades").
func (u *UI) tenantOpsFragments(tenant string) []fragment { return nil }
