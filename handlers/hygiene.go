package handlers

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// bodyMediaTypes are the media types a changing request's body may have.
// Anything else, or none, is what a browser sends cross-origin without a
// preflight (forms, text/plain, a bare fetch), so refusing it closes that
// door; handlers narrow the choice further.
var bodyMediaTypes = map[string]bool{
	"application/json":             true,
	"application/merge-patch+json": true,
	"application/yaml":             true,
	"application/x-yaml":           true,
}

// guardedPath reports whether the request hygiene checks apply to the path:
// the API and the state backend, not the web UI's own pages (which check
// their own CSRF token and take forms).
func guardedPath(p string) bool {
	return strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/tfstate/")
}

// requestHygiene refuses changing requests a browser could have been made to
// send by another site: a body of a media type other than JSON or YAML (415),
// and a change authenticated only by the session cookie that does not come
// from the server's own origin (403). Reads, and requests with a bearer token,
// pass the origin check: a bearer token is never added by the browser.
func (a *API) requestHygiene(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !safeMethod(r.Method) && r.URL.Query().Has("dryRun") && !a.dryRunRoutes[r.Method+" "+c.Path()] {
			// A client asking for a dry run must never get a real write.
			return domain.NewBadRequest("dryRun is not supported on "+r.Method+" "+c.Path(),
				domain.Cause{Field: "dryRun", Type: domain.CauseNotSupported, Message: "not supported on this route"})
		}
		if safeMethod(r.Method) || !guardedPath(r.URL.Path) {
			return next(c)
		}
		if hasBody(r) {
			if err := checkBodyMediaType(r.Header.Get("Content-Type")); err != nil {
				return err
			}
		}
		if cookieAuthenticated(r) {
			if err := checkSameOrigin(r); err != nil {
				return err
			}
		}
		return next(c)
	}
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// hasBody reports whether the request carries a body: a length, or a
// chunked one of unknown length.
func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

func checkBodyMediaType(ct string) error {
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || !bodyMediaTypes[mt] {
		return &domain.Error{Reason: domain.ReasonUnsupportedMediaType,
			Message: fmt.Sprintf("content type %q is not supported: a request body must be application/json, application/merge-patch+json or application/yaml", clip(ct, 100))}
	}
	return nil
}

// cookieAuthenticated reports whether the session cookie is the request's
// credential, as the Authenticator picks it: no Authorization header.
func cookieAuthenticated(r *http.Request) bool {
	if r.Header.Get("Authorization") != "" {
		return false
	}
	ck, err := r.Cookie(identity.SessionCookie)
	return err == nil && ck.Value != ""
}

// checkSameOrigin accepts a request the browser marks as same-origin
// (Sec-Fetch-Site), or, from a browser that does not send that header, one
// whose Origin is the server's own (its host equal to the Host asked for).
// Browsers send Origin with every changing request, so a request with neither
// header is refused.
func checkSameOrigin(r *http.Request) error {
	refuse := func(why string) error {
		return &domain.Error{Reason: domain.ReasonForbidden,
			Message: "a change authenticated by the session cookie must come from this server's own pages: " + why}
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		if site != "same-origin" {
			return refuse(fmt.Sprintf("Sec-Fetch-Site is %q", clip(site, 40)))
		}
		return nil
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return refuse("the request has neither Origin nor Sec-Fetch-Site")
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return refuse(fmt.Sprintf("Origin %q is not this server's", clip(origin, 100)))
	}
	return nil
}

// clip bounds a client-chosen string quoted in a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
