package webui

import (
	"net/http"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (u *UI) dashboardRoutes(p *pages) {
	p.GET("/", u.dashboard)
	p.GET("/live/dashboard", u.dashboardLive)
}

func (u *UI) dashboardFragments() []fragment {
	return []fragment{
		{Event: "tenants", Render: func(c echo.Context) (templ.Component, error) {
			ts, err := listOf[domain.Tenant](u, c.Request(), "/tenants")
			return dashTenants(ts), err
		}},
		{Event: "applies", Render: func(c echo.Context) (templ.Component, error) {
			as, err := u.recentApplies(c.Request(), "")
			return appliesTable(as, true), err
		}},
		{Event: "upgrades", Render: func(c echo.Context) (templ.Component, error) {
			us, err := u.recentUpgrades(c.Request(), "")
			return upgradesTable(us, true), err
		}},
		{Event: "audit", Render: func(c echo.Context) (templ.Component, error) {
			if !viewerOf(c).CanReadAudit() {
				return templ.NopComponent, nil
			}
			recs, err := u.recentAudit(c.Request(), 10, nil)
			return auditTable(recs), err
		}},
	}
}

// recentApplies lists the newest applies, of one tenant or all.
func (u *UI) recentApplies(r *http.Request, tenant string) ([]domain.Apply, error) {
	path := "/applies"
	if tenant != "" {
		path = "/tenants/" + tenant + "/applies"
	}
	as, err := listOf[domain.Apply](u, r, path)
	if err != nil {
		return nil, err
	}
	newestFirst(as, applyMeta)
	return firstN(as, 10), nil
}

// recentUpgrades lists the newest upgrades, of one tenant or all.
func (u *UI) recentUpgrades(r *http.Request, tenant string) ([]domain.Upgrade, error) {
	path := "/upgrades"
	if tenant != "" {
		path = "/tenants/" + tenant + "/upgrades"
	}
	us, err := listOf[domain.Upgrade](u, r, path)
	if err != nil {
		return nil, err
	}
	newestFirst(us, upgradeMeta)
	return firstN(us, 10), nil
}

func (u *UI) dashboard(c echo.Context) error {
	comps, seen, err := renderFragments(c, u.dashboardFragments())
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, DashboardPage(u, viewerOf(c), comps, seen))
}

func (u *UI) dashboardLive(c echo.Context) error {
	return u.live(c, allSubjects(), u.dashboardFragments()...)
}
