package handlers

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// AuditSSOLogin names a sign-in through single sign-on in the audit log.
const AuditSSOLogin = "SSOLogin"

// ssoRoutes registers single sign-on: the login's start and callback (a
// browser's), the one-time code exchange of rezusctl login --sso, and what
// the sign-in page needs to know. None needs a caller's identity.
func (a *API) ssoRoutes() {
	a.echo.GET("/api/v1/auth/sso", a.ssoInfo)
	a.echo.GET("/api/v1/auth/sso/start", a.ssoStart)
	a.echo.GET("/api/v1/auth/sso/callback", a.ssoCallback)
	a.echo.POST("/api/v1/auth/sso/token", a.ssoToken)
}

// ssoInfo says which ways of signing in the server offers.
func (a *API) ssoInfo(c echo.Context) error {
	if err := a.requireIdentity(); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]bool{"sso": a.identity.SSOEnabled(), "passwordLogin": a.identity.PasswordLogin()})
}

// ssoStart sends the browser to the identity provider, with the login's
// state in a cookie. ?return= is a web UI path to come back to; rezusctl
// gives ?cli_redirect=&cli_challenge=&cli_state= instead.
func (a *API) ssoStart(c echo.Context) error {
	if err := a.requireIdentity(); err != nil {
		return err
	}
	q := c.QueryParams()
	var cli *identity.CLILogin
	if q.Has("cli_redirect") {
		cli = &identity.CLILogin{Redirect: q.Get("cli_redirect"), Challenge: q.Get("cli_challenge"), State: q.Get("cli_state")}
	}
	start, err := a.identity.StartSSO(c.Request().Context(), localReturn(q.Get("return")), cli)
	if err != nil {
		return err
	}
	c.SetCookie(&http.Cookie{Name: identity.SSOStateCookie, Value: start.Cookie, Path: "/api/v1/auth/sso/", Expires: start.Expires,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: a.identity.SecureCookies()})
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Redirect(http.StatusFound, start.AuthURL)
}

// localReturn keeps a return path only when it is a path of the web UI on
// this server (no scheme, no host, no "//"): the login must not become an
// open redirect.
func localReturn(p string) string {
	if p == "" || len(p) > 2048 || !strings.HasPrefix(p, "/ui") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n") {
		return "/ui/"
	}
	if u, err := url.Parse(p); err != nil || u.Scheme != "" || u.Host != "" {
		return "/ui/"
	}
	return p
}

// ssoCallback finishes a login the identity provider sent back: a web
// session cookie and the way back into the web UI, or, for rezusctl, a
// redirect to its loopback address with a one-time code. Audited.
func (a *API) ssoCallback(c echo.Context) error {
	if err := a.requireIdentity(); err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	clearState := &http.Cookie{Name: identity.SSOStateCookie, Value: "", Path: "/api/v1/auth/sso/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: a.identity.SecureCookies()}
	q := c.QueryParams()
	c.Set(auditTargetKey, auditTarget{kind: AuditSSOLogin})
	if e := q.Get("error"); e != "" {
		c.SetCookie(clearState)
		return a.ssoFailed(c, domain.NewUnauthorized("the identity provider refused the sign-in: "+truncate(e+" "+q.Get("error_description"), 256)))
	}
	ck, err := c.Cookie(identity.SSOStateCookie)
	if err != nil {
		return a.ssoFailed(c, domain.NewUnauthorized("the sign-in was not started in this browser (no state cookie); start it again"))
	}
	c.SetCookie(clearState)
	res, err := a.identity.FinishSSO(c.Request().Context(), ck.Value, q.Get("state"), q.Get("code"))
	if err != nil {
		return a.ssoFailed(c, err)
	}
	c.Set(identityKey, res.Identity)
	detail := "groups: " + strings.Join(res.Identity.Groups, ",")
	if res.GroupsDropped > 0 {
		detail += " (some groups of the provider were not kept: empty, too long or too many)"
	}
	c.Set(auditTargetKey, auditTarget{kind: AuditSSOLogin, name: res.Identity.Name, detail: detail})
	if res.CLIRedirect != "" {
		return c.Redirect(http.StatusFound, res.CLIRedirect)
	}
	c.SetCookie(&http.Cookie{Name: identity.SessionCookie, Value: res.Token, Path: "/", Expires: res.Expires, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: a.identity.SecureCookies()})
	return c.Redirect(http.StatusFound, res.Return)
}

// ssoFailed answers a failed callback: back to the sign-in page with the
// message when there is one, else as a Status.
func (a *API) ssoFailed(c echo.Context, err error) error {
	if a.cfg.SSOErrorPage == "" {
		return err
	}
	c.Response().Status = statusCodeOf(err)
	msg := err.Error()
	if de, ok := err.(*domain.Error); ok {
		msg = de.Message
	}
	a.recordAudit(c, statusCodeOf(err), auditTarget{kind: AuditSSOLogin, detail: msg})
	c.Set(auditTargetKey, nil)
	return c.Redirect(http.StatusSeeOther, a.cfg.SSOErrorPage+"?sso_error="+url.QueryEscape(truncate(msg, 512)))
}

type ssoTokenRequest struct {
	Code         string `json:"code"`
	CodeVerifier string `json:"codeVerifier"`
}

// ssoToken exchanges a CLI login's one-time code and PKCE verifier for the
// session token (answered as /auth/login answers).
func (a *API) ssoToken(c echo.Context) error {
	if err := a.requireIdentity(); err != nil {
		return err
	}
	body, err := a.readBody(c, "application/json")
	if err != nil {
		return err
	}
	var req ssoTokenRequest
	if causes := domain.DecodeStrict(body, &req, ""); causes != nil {
		return domain.NewBadRequest("the token request is not valid", causes...)
	}
	tok, exp, id, err := a.identity.ExchangeCLICode(c.Request().Context(), req.Code, req.CodeVerifier)
	if err != nil {
		return err
	}
	c.Set(identityKey, id)
	c.Set(auditTargetKey, auditTarget{kind: AuditSSOLogin, name: id.Name, detail: "rezusctl; groups: " + strings.Join(id.Groups, ",")})
	return c.JSON(http.StatusOK, map[string]any{"token": tok, "expiresAt": exp.UTC().Format(time.RFC3339), "user": id.Name, "role": id.Role})
}
