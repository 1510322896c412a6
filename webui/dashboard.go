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
		{Event: "fleet", Render: func(c echo.Context) (templ.Component, error) {
			f, err := u.fleet(c)
			return dashFleet(f), err
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

// dashboardLive re-renders on the kinds the dashboard shows (and group
// bindings, which change the tenants a user sees); machines, node groups
// and the rest reach it through their tenant's status. At fleet size that
// spares a re-render for each machine's status write.
func (u *UI) dashboardLive(c echo.Context) error {
	subjects := make([]string, 0, 5)
	for _, k := range []*domain.KindInfo{domain.TenantKind, domain.ApplyKind, domain.UpgradeKind, domain.RolloutKind, domain.GroupBindingKind} {
		subjects = append(subjects, domain.SubjectFilter(k, "", ""))
	}
	return u.live(c, subjects, u.dashboardFragments()...)
}

// fleet summarises the tenants the user may see, and the rollouts under
// way for a user with a global role.
func (u *UI) fleet(c echo.Context) (fleetView, error) {
	ts, err := listOf[domain.Tenant](u, c.Request(), "/tenants")
	if err != nil {
		return fleetView{}, err
	}
	var ros []domain.Rollout
	v := viewerOf(c)
	if v.CanReadGlobal() {
		if ros, err = listOf[domain.Rollout](u, c.Request(), "/rollouts"); err != nil {
			return fleetView{}, err
		}
	}
	f := summarizeFleet(ts, ros, u.now())
	f.CanReadRollouts = v.CanReadGlobal()
	return f, nil
}
