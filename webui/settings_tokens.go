package webui

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// tokenForm is the create form's values and the API's refusal.
type tokenForm struct {
	Name, Description string
	// ExpiresIn is a number of days, "" for never.
	ExpiresIn string
	// Owner is spec.user; only admins see the field (others own what they create).
	Owner string
	// Bindings, when any, narrow the token to some tenants.
	Bindings []bindingRow
	Errors   formErrors
}

// tokenFormFields are the create form's fields as the API names them in causes.
var tokenFormFields = []string{"metadata.name", "spec.description", "spec.expiresAt", "spec.user"}

// tokenLifetimes are the choices of the expiry select, in days.
var tokenLifetimes = []struct{ Days, Label string }{
	{"", "never"}, {"1", "in 1 day"}, {"7", "in 7 days"}, {"30", "in 30 days"}, {"90", "in 90 days"}, {"365", "in a year"},
}

// createdToken is the API's answer to a create: the object and, once, its secret.
type createdToken struct {
	domain.APIToken
	Token string `json:"token"`
}

func (u *UI) listTokens(r *http.Request) ([]domain.APIToken, error) {
	ts, err := listOf[domain.APIToken](u, r, "/apitokens")
	if err != nil {
		return nil, err
	}
	newestFirst(ts, func(t *domain.APIToken) *domain.ObjectMeta { return &t.Metadata })
	return ts, nil
}

// tokensPage lists the viewer's tokens (an admin's: everyone's); the API
// filters what each role sees. A token's secret is never shown here.
func (u *UI) tokensPage(c echo.Context) error {
	ts, err := u.listTokens(c.Request())
	if err != nil {
		return u.fail(c, err)
	}
	v := viewerOf(c)
	return render(c, http.StatusOK, TokensPage(u, v, ts, u.now(), tokenForm{ExpiresIn: "90", Owner: v.Name}))
}

// createToken issues a token. The API answers its secret this once; it goes
// into this answer only (never stored, logged or cached) and the list shows
// only the token's name from then on.
func (u *UI) createToken(c echo.Context) error {
	v := viewerOf(c)
	f := tokenForm{Name: strings.TrimSpace(c.FormValue("metadata.name")), Description: strings.TrimSpace(c.FormValue("spec.description")),
		ExpiresIn: c.FormValue("expiresIn"), Owner: strings.TrimSpace(c.FormValue("spec.user"))}
	rows, op, err := readBindingRows(c)
	if err != nil {
		return u.fail(c, err)
	}
	f.Bindings = rows
	if !op.Save() {
		return render(c, http.StatusOK, tokenCreateForm(v, f))
	}
	f.Bindings = keptBindingRows(rows)
	again := func(err error) error {
		f.Errors = toFormErrors(err, append(bindingFields(len(f.Bindings)), tokenFormFields...)...)
		return render(c, errorCode(err), tokenCreateForm(v, f))
	}
	spec := map[string]any{}
	if len(f.Bindings) > 0 {
		spec["bindings"] = bindingsOf(f.Bindings)
	}
	if f.Description != "" {
		spec["description"] = f.Description
	}
	if f.Owner != "" {
		spec["user"] = f.Owner
	}
	if f.ExpiresIn != "" {
		days, err := strconv.Atoi(f.ExpiresIn)
		if err != nil || days < 1 || days > 3650 {
			return again(domain.NewInvalid(domain.APITokenKind.Kind, f.Name, []domain.Cause{{Field: "spec.expiresAt", Type: domain.CauseInvalid,
				Message: "choose a number of days from 1 to 3650, or never"}}))
		}
		spec["expiresAt"] = u.now().Add(time.Duration(days) * 24 * time.Hour).UTC().Format(time.RFC3339)
	}
	tok := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.APITokenKind.Kind,
		"metadata": map[string]any{"name": f.Name}, "spec": spec}
	var created createdToken
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/apitokens", Body: tok}, &created); err != nil {
		if errorCode(err) == http.StatusForbidden {
			return u.fail(c, err)
		}
		return again(err)
	}
	ts, err := u.listTokens(c.Request())
	if err != nil {
		return u.fail(c, err)
	}
	noStore(c)
	return render(c, http.StatusCreated, tokenCreated(v, created.Metadata.Name, created.Token, ts, u.now()))
}

// revokeToken deletes the token; the API refuses it from then on.
func (u *UI) revokeToken(c echo.Context) error {
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodDelete, Path: "/apitokens/" + c.Param("name")}, nil); err != nil {
		return u.fail(c, err)
	}
	ts, err := u.listTokens(c.Request())
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, tokensTable(viewerOf(c), ts, u.now()))
}

// tokenExpiry shows when a token expires and whether it has.
func tokenExpiry(t domain.APIToken, now time.Time) string {
	if t.Spec.ExpiresAt == nil {
		return "never"
	}
	s := t.Spec.ExpiresAt.UTC().Format("2006-01-02 15:04Z")
	if !t.Spec.ExpiresAt.After(now) {
		s += " (expired)"
	}
	return s
}

// timeOrDash formats an optional time in UTC.
func timeOrDash(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04Z")
}
