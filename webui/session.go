package webui

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
)

const (
	viewerKey = "webui.viewer"
	// preSessionCookie binds the sign-in form's CSRF token before a session exists.
	preSessionCookie = "rezus_csrf"
	// csrfField and csrfHeader carry the token in forms and htmx requests.
	csrfField  = "_csrf"
	csrfHeader = "X-CSRF-Token"
)

// viewer is the signed-in user as pages see them.
type viewer struct {
	Name string
	Role string
	// uid is the user's uid (empty for identities without a user object):
	// live streams are counted with the user's API watches by it.
	uid string
	// CSRF is the token every form and htmx request of this session carries.
	CSRF string
	// Path is the page's path, for the navigation's current item.
	Path string

	// access is the user's global role and tenant bindings; labels looks a
	// tenant's labels up (for bindings by selector) where the API does, in
	// the read model, so the buttons a page shows are those the API allows.
	access domain.Access
	labels func(tenant string) map[string]string
}

// CanWrite: a global edit or admin role may change anything (create tenants).
// Pages of one tenant ask CanWriteTenant instead: bindings add roles there.
func (v viewer) CanWrite() bool { return handlers.CanWrite(v.access.Global()) }

// CanReadGlobal: a global role of any rank reads cluster-wide kinds
// (rollouts); tenant bindings alone do not.
func (v viewer) CanReadGlobal() bool { return domain.RoleRank(v.access.Global()) > 0 }

// CanAdmin: only global admins manage users, providers and rollouts.
func (v viewer) CanAdmin() bool { return handlers.CanAdmin(v.access.Global()) }

// Scoped reports whether the user has tenant bindings.
func (v viewer) Scoped() bool { return v.access.Scoped() }

// TenantRole is the user's role on a tenant: the global role, raised by any
// binding that covers the tenant (none when it may not see it).
func (v viewer) TenantRole(tenant string) string {
	if !v.access.Scoped() {
		return v.access.Global()
	}
	var labels map[string]string
	if v.labels != nil {
		labels = v.labels(tenant)
	}
	return v.access.TenantRole(tenant, labels)
}

// CanWriteTenant: edit or admin on the tenant may change what is in it.
func (v viewer) CanWriteTenant(tenant string) bool { return handlers.CanWrite(v.TenantRole(tenant)) }

// IsTenantAdmin: admin on the tenant (globally or by a binding).
func (v viewer) IsTenantAdmin(tenant string) bool { return handlers.CanAdmin(v.TenantRole(tenant)) }

// writerOf refuses an editor's page (a form) on a tenant the viewer may not
// change: 404 when it may not even see the tenant, as the API answers, so
// names do not leak; 403 when it may only read it.
func writerOf(c echo.Context, tenant, kind, name, what string) error {
	v := viewerOf(c)
	role := v.TenantRole(tenant)
	switch {
	case domain.RoleRank(role) == 0:
		return domain.NewNotFound(domain.TenantKind.Kind, tenant)
	case !handlers.CanWrite(role):
		return domain.NewForbidden(kind, name, "your role on tenant "+tenant+" ("+role+") may not change "+what)
	}
	return nil
}

// CanReadAudit: global admins read the whole audit log, a tenant's admins
// the records of their tenants (the API filters them).
func (v viewer) CanReadAudit() bool { return handlers.CanAdmin(v.access.Highest()) }

// CanSeeAny: a role somewhere (providers are readable then).
func (v viewer) CanSeeAny() bool { return domain.RoleRank(v.access.Highest()) > 0 }

// tenantLabels are a tenant's labels as the read model holds them now (the
// API judges bindings by selector with the same).
func (u *UI) tenantLabels(tenant string) map[string]string {
	if u.cache == nil {
		return nil
	}
	t, ok := u.cache.GetObject(domain.ObjectRef(domain.TenantKind, "", tenant))
	if !ok {
		return nil
	}
	return t.Metadata.Labels
}

func viewerOf(c echo.Context) viewer {
	v, _ := c.Get(viewerKey).(viewer)
	return v
}

// authenticate lets signed-in users through; others go to the sign-in page
// (htmx requests are told to navigate there).
func (u *UI) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		id, err := u.identity.Authenticate(r)
		ck, cerr := r.Cookie(identity.SessionCookie)
		if err != nil || cerr != nil || ck.Value == "" || id.AuthMethod != identity.AuthSession {
			return u.toLogin(c)
		}
		c.Set(viewerKey, viewer{Name: id.Name, Role: id.Role, uid: id.UID, CSRF: u.identity.CSRFToken(ck.Value), Path: r.URL.Path,
			access: id.Access(), labels: u.tenantLabels})
		return next(c)
	}
}

func (u *UI) toLogin(c echo.Context) error {
	if isLive(c) {
		// A live stream (re)connecting after its session ended: say so, and
		// let the page close it, rather than redirect an EventSource that
		// would then retry forever.
		return u.endLiveNow(c, &liveEnd{Message: sessionEnded, SignIn: true})
	}
	target := Prefix + "/login"
	if r := c.Request(); r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, Prefix+"/live") {
		target += "?next=" + url.QueryEscape(r.URL.RequestURI())
	}
	if isHTMX(c) {
		c.Response().Header().Set("HX-Redirect", target)
		return c.NoContent(http.StatusUnauthorized)
	}
	return c.Redirect(http.StatusSeeOther, target)
}

// checkCSRF refuses a changing request whose token is not the session's.
func (u *UI) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return next(c)
		}
		ck, err := r.Cookie(identity.SessionCookie)
		if err != nil || !u.identity.CheckCSRF(ck.Value, csrfToken(c)) {
			return u.fail(c, domain.NewForbidden("", "", "the form's security token is missing or stale; reload the page and try again"))
		}
		return next(c)
	}
}

func csrfToken(c echo.Context) string {
	if t := c.Request().Header.Get(csrfHeader); t != "" {
		return t
	}
	return c.FormValue(csrfField)
}

// loginPage shows the sign-in form with a CSRF token bound to a fresh
// pre-session cookie.
func (u *UI) loginPage(c echo.Context) error {
	if id, err := u.identity.Authenticate(c.Request()); err == nil && id.AuthMethod == identity.AuthSession {
		return c.Redirect(http.StatusSeeOther, safeNext(c.QueryParam("next")))
	}
	token := u.preSession(c)
	form := loginForm{CSRF: token, Next: safeNext(c.QueryParam("next"))}
	u.signInWays(c, &form)
	code := http.StatusOK
	if msg := c.QueryParam("sso_error"); msg != "" {
		// A failed single sign-on comes back here with the server's reason.
		form.Error, code = truncateRunes(msg, 300), http.StatusUnauthorized
	}
	return render(c, code, LoginPage(u, form))
}

// preSession returns the CSRF token of the browser's pre-session cookie,
// setting a new cookie when there is none.
func (u *UI) preSession(c echo.Context) string {
	if ck, err := c.Cookie(preSessionCookie); err == nil && len(ck.Value) >= 16 {
		return u.identity.CSRFToken(ck.Value)
	}
	raw := make([]byte, 18)
	_, _ = rand.Read(raw)
	v := base64.RawURLEncoding.EncodeToString(raw)
	c.SetCookie(&http.Cookie{Name: preSessionCookie, Value: v, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: u.cfg.SecureCookies})
	return u.identity.CSRFToken(v)
}

// login signs in through the API, which sets the session cookie.
func (u *UI) login(c echo.Context) error {
	form := loginForm{Username: strings.TrimSpace(c.FormValue("username")), Next: safeNext(c.FormValue("next"))}
	u.signInWays(c, &form)
	ck, err := c.Cookie(preSessionCookie)
	if err != nil || !u.identity.CheckCSRF(ck.Value, c.FormValue(csrfField)) {
		form.CSRF = u.preSession(c)
		form.Error = "The sign-in form expired; please try again."
		return render(c, http.StatusForbidden, LoginPage(u, form))
	}
	form.CSRF = u.identity.CSRFToken(ck.Value)
	rec, err := u.api.callRaw(c.Request(), apiRequest{Method: http.MethodPost, Path: "/auth/login",
		Body: map[string]string{"username": form.Username, "password": c.FormValue("password")}}, nil)
	if err != nil {
		form.Error = err.Error()
		return render(c, errorCode(err), LoginPage(u, form))
	}
	for _, ck := range rec.cookies() {
		c.SetCookie(ck)
	}
	return c.Redirect(http.StatusSeeOther, form.Next)
}

// logout ends the session through the API.
func (u *UI) logout(c echo.Context) error {
	rec, err := u.api.callRaw(c.Request(), apiRequest{Method: http.MethodPost, Path: "/auth/logout"}, nil)
	if err != nil {
		return u.fail(c, err)
	}
	for _, ck := range rec.cookies() {
		c.SetCookie(ck)
	}
	if isHTMX(c) {
		c.Response().Header().Set("HX-Redirect", Prefix+"/login")
		return c.NoContent(http.StatusNoContent)
	}
	return c.Redirect(http.StatusSeeOther, Prefix+"/login")
}

// safeNext keeps redirects after sign-in inside the UI.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") ||
		strings.HasPrefix(next, Prefix+"/login") || strings.HasPrefix(next, Prefix+"/live") {
		return Prefix + "/"
	}
	return next
}

// loginForm is what the sign-in page shows.
type loginForm struct {
	Username string
	Next     string
	CSRF     string
	Error    string
	// SSO offers single sign-on; Password the password form (the server
	// may have turned it off).
	SSO, Password bool
}

// signInWays asks the API which ways of signing in the server offers.
func (u *UI) signInWays(c echo.Context, f *loginForm) {
	var ways struct {
		SSO           bool `json:"sso"`
		PasswordLogin bool `json:"passwordLogin"`
	}
	f.Password = true
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodGet, Path: "/auth/sso"}, &ways); err == nil {
		f.SSO, f.Password = ways.SSO, ways.PasswordLogin
	}
}

// SSOStart is the URL that starts a single sign-on coming back to next.
func (f loginForm) SSOStart() string {
	return "/api/v1/auth/sso/start?return=" + url.QueryEscape(f.Next)
}

// truncateRunes cuts s to at most n runes.
func truncateRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
