package webui

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// settingsRoutes serves users, API tokens, providers, the audit log and the
// replicas.
func (u *UI) settingsRoutes(p *pages) {
	p.GET("/settings", u.settingsIndex)
	p.PUT("/settings/password", u.changeOwnPassword)

	p.GET("/settings/users", u.adminOnly(u.usersPage))
	p.POST("/settings/users", u.createUser)
	p.PUT("/settings/users/:name", u.updateUser)
	p.PUT("/settings/users/:name/password", u.setUserPassword)
	p.PUT("/settings/users/:name/bindings", u.updateUserBindings)
	p.DELETE("/settings/users/:name", u.deleteUser)

	p.GET("/settings/groups", u.adminOnly(u.groupBindingsPage))
	p.POST("/settings/groups", u.createGroupBinding)
	p.DELETE("/settings/groups/:name", u.deleteGroupBinding)

	p.GET("/settings/tokens", u.tokensPage)
	p.POST("/settings/tokens", u.createToken)
	p.DELETE("/settings/tokens/:name", u.revokeToken)

	p.GET("/settings/providers", u.providersPage)
	p.POST("/settings/providers", u.createProvider)
	p.DELETE("/settings/providers/:name", u.deleteProvider)
	p.PUT("/settings/credentials", u.putCredentials)

	p.GET("/settings/audit", u.auditReaders(u.auditPage))

	p.GET("/settings/replicas", u.adminOnly(u.replicasPage))
}

// settingsTab is one section of the settings.
type settingsTab struct {
	Href, Label, Description string
	// Shown tells whether the viewer may use the section (nil: everyone).
	Shown func(v viewer) bool
}

var settingsTabList = []settingsTab{
	{Href: "/ui/settings/users", Label: "Users", Description: "Who may sign in, with which role and tenant bindings.", Shown: viewer.CanAdmin},
	{Href: "/ui/settings/groups", Label: "Group bindings", Description: "What identity-provider groups give the users who sign in with single sign-on.", Shown: viewer.CanAdmin},
	{Href: "/ui/settings/tokens", Label: "API tokens", Description: "Long-lived credentials for programs and the CLI."},
	{Href: "/ui/settings/providers", Label: "Providers", Description: "Where machines are built: clouds, bare metal, the emulator.", Shown: viewer.CanSeeAny},
	{Href: "/ui/settings/audit", Label: "Audit log", Description: "Every change made through the API, by whom and how it ended.", Shown: viewer.CanReadAudit},
	{Href: "/ui/settings/replicas", Label: "Replicas", Description: "The servers running on this data: release, heartbeat and how many tenants each works.", Shown: viewer.CanAdmin},
}

// tabsFor are the tabs the viewer may open: users for admins, the audit log
// for admins and tenant admins (who see their tenants' records), providers
// for anyone with a role somewhere.
func tabsFor(v viewer) []settingsTab {
	var out []settingsTab
	for _, t := range settingsTabList {
		if t.Shown == nil || t.Shown(v) {
			out = append(out, t)
		}
	}
	return out
}

// auditReaders lets admins and tenant admins open the audit log; the API
// shows a tenant admin only the records of its tenants.
func (u *UI) auditReaders(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if v := viewerOf(c); !v.CanReadAudit() {
			return u.fail(c, domain.NewForbidden("", "", "only admins (of the whole server or of a tenant) may open "+strings.TrimPrefix(c.Request().URL.Path, Prefix)))
		}
		return h(c)
	}
}

// adminOnly refuses a page to non-admins: some of what admin pages read (the
// user list) is readable by every role through the API, but managing it is not.
func (u *UI) adminOnly(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if v := viewerOf(c); !v.CanAdmin() {
			return u.fail(c, domain.NewForbidden("", "", "only admins may open "+strings.TrimPrefix(c.Request().URL.Path, Prefix)))
		}
		return h(c)
	}
}

// passwordForm is the change-your-own-password form.
type passwordForm struct {
	Done   bool
	Errors formErrors
}

func (u *UI) settingsIndex(c echo.Context) error {
	v := viewerOf(c)
	return render(c, http.StatusOK, SettingsPage(u, v, passwordForm{}))
}

// changeOwnPassword changes the viewer's password; the API checks the current one.
func (u *UI) changeOwnPassword(c echo.Context) error {
	v := viewerOf(c)
	body := map[string]string{"password": c.FormValue("password"), "currentPassword": c.FormValue("currentPassword")}
	err := u.api.call(c.Request(), apiRequest{Method: http.MethodPut, Path: "/users/" + v.Name + "/password", Body: body}, nil)
	if err != nil {
		return render(c, errorCode(err), ownPasswordForm(passwordForm{Errors: toFormErrors(err, "password", "currentPassword")}))
	}
	return render(c, http.StatusOK, ownPasswordForm(passwordForm{Done: true}))
}

// noStore keeps an answer out of every cache (it shows a secret).
func noStore(c echo.Context) {
	c.Response().Header().Set("Cache-Control", "no-store")
}
