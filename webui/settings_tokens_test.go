package webui

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

var newTokenPattern = regexp.MustCompile(`data-testid="new-token">([^<]+)</code>`)

// settingsWhoami calls /api/v1/auth/whoami with a bearer token.
func settingsWhoami(t *testing.T, s *uiStack, token string) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.srv.URL+"/api/v1/auth/whoami", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]string{}
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(raw, &out))
	}
	return resp.StatusCode, out
}

func TestTokensShownOnceWorkAndRevoke(t *testing.T) {
	s := newUIStack(t)
	for _, role := range []string{"view", "admin"} {
		t.Run(role, func(t *testing.T) {
			name := "tok-" + role
			b := s.signIn(name, role)
			page := b.get("/ui/settings/tokens")
			require.Equal(t, http.StatusOK, page.Code, page.Body)
			require.Contains(t, page.Body, `data-testid="token-create"`)
			require.Contains(t, page.Body, `aria-current="page" data-tab="API tokens"`)

			p := b.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"ci-" + role},
				"spec.description": {"deploys from CI"}, "expiresIn": {"30"}})
			require.Equal(t, http.StatusCreated, p.Code, p.Body)
			require.Equal(t, "no-store", p.Header.Get("Cache-Control"))
			m := newTokenPattern.FindStringSubmatch(p.Body)
			require.NotNil(t, m, p.Body)
			secret := m[1]
			require.NotEmpty(t, secret)
			require.Contains(t, p.Body, `id="token-rows" hx-swap-oob="innerHTML"`)
			require.Contains(t, p.Body, `data-token="ci-`+role+`"`)

			// The list, read again, names the token but never shows its secret.
			list := b.get("/ui/settings/tokens")
			require.Equal(t, http.StatusOK, list.Code)
			require.Contains(t, list.Body, `data-token="ci-`+role+`"`)
			require.Contains(t, list.Body, "deploys from CI")
			require.NotContains(t, list.Body, secret)
			require.NotContains(t, list.Body, `data-testid="new-token"`)
			require.Contains(t, list.Body, `hx-confirm="Revoke token ci-`+role+`?`)

			var tok domain.APIToken
			s.apiCall(http.MethodGet, "/apitokens/ci-"+role, nil, &tok)
			require.Equal(t, name, tok.Spec.User)
			require.NotNil(t, tok.Spec.ExpiresAt)
			require.WithinDuration(t, time.Now().Add(30*24*time.Hour), *tok.Spec.ExpiresAt, time.Hour)

			code, who := settingsWhoami(t, s, secret)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, name, who["user"])
			require.Equal(t, role, who["role"])

			revoked := b.hx(http.MethodDelete, "/ui/settings/tokens/ci-"+role, nil)
			require.Equal(t, http.StatusOK, revoked.Code, revoked.Body)
			require.NotContains(t, revoked.Body, `data-token="ci-`+role+`"`)
			code, _ = settingsWhoami(t, s, secret)
			require.Equal(t, http.StatusUnauthorized, code)
		})
	}
}

func TestTokensVisibility(t *testing.T) {
	s := newUIStack(t)
	admin := s.signIn("boss", "admin")
	viewer := s.signIn("peek", "view")
	admin.get("/ui/settings/tokens")
	viewer.get("/ui/settings/tokens")
	require.Equal(t, http.StatusCreated, admin.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"boss-token"}}).Code)
	require.Equal(t, http.StatusCreated, viewer.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"peek-token"}, "expiresIn": {""}}).Code)

	// An admin sees every token and may create one for another user.
	p := admin.get("/ui/settings/tokens")
	require.Contains(t, p.Body, `data-token="boss-token"`)
	require.Contains(t, p.Body, `data-token="peek-token"`)
	require.Contains(t, p.Body, `name="spec.user"`)
	forOther := admin.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"for-peek"}, "spec.user": {"peek"}})
	require.Equal(t, http.StatusCreated, forOther.Code, forOther.Body)
	noOwner := admin.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"for-ghost"}, "spec.user": {"ghost"}})
	require.Equal(t, http.StatusUnprocessableEntity, noOwner.Code, noOwner.Body)
	require.Contains(t, noOwner.Body, `data-field-error="spec.user"`)

	// Others see their own only, cannot name an owner, and cannot revoke the admin's.
	p = viewer.get("/ui/settings/tokens")
	require.Contains(t, p.Body, `data-token="peek-token"`)
	require.Contains(t, p.Body, `data-token="for-peek"`)
	require.Contains(t, p.Body, "never")
	require.NotContains(t, p.Body, `data-token="boss-token"`)
	require.NotContains(t, p.Body, `name="spec.user"`)
	other := viewer.hx(http.MethodDelete, "/ui/settings/tokens/boss-token", nil)
	require.Equal(t, http.StatusNotFound, other.Code, other.Body)
	forged := viewer.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"forged"}, "spec.user": {"boss"}})
	require.Equal(t, http.StatusForbidden, forged.Code, forged.Body)
	s.apiCall(http.MethodGet, "/apitokens/boss-token", nil, nil)
}

func TestTokensFieldErrors(t *testing.T) {
	s := newUIStack(t)
	b := s.signIn("dev", "edit")
	b.get("/ui/settings/tokens")
	for _, tc := range []struct {
		name  string
		form  url.Values
		field string
	}{
		{"capitals in the name", url.Values{"metadata.name": {"CI"}}, "metadata.name"},
		{"unknown lifetime", url.Values{"metadata.name": {"ci"}, "expiresIn": {"forever"}}, "spec.expiresAt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := b.hx(http.MethodPost, "/ui/settings/tokens", tc.form)
			require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
			require.Contains(t, p.Body, `data-field-error="`+tc.field+`"`)
			require.NotContains(t, p.Body, `data-testid="new-token"`)
		})
	}
	// Without a name the API makes one up.
	p := b.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {""}})
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	require.Regexp(t, `Token dev-[0-9a-f]{8} was created`, p.Body)
}

// A user narrows a new token to some tenants on the token page: the list
// shows its scope, the token acts only there, and a binding wider than the
// user's own access or a bad selector is refused beside the field at fault.
func TestTokensNarrowedByBindings(t *testing.T) {
	s := newUIStack(t)
	s.createTenant("acme", nil)
	s.createTenant("beta", nil)
	b := s.signInBound("tom", domain.RoleView, []map[string]any{{"role": "edit", "tenants": []string{"acme"}}})
	page := b.get("/ui/settings/tokens")
	require.Contains(t, page.Body, `data-testid="token-bindings"`)
	require.Contains(t, page.Body, `data-testid="no-bindings"`)

	add := b.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"ci"}, "op": {"add"}})
	require.Equal(t, http.StatusOK, add.Code, add.Body)
	require.Contains(t, add.Body, `data-binding-row="0"`)
	require.Contains(t, add.Body, `value="ci"`, "what was typed stays")
	var list itemList[domain.APIToken]
	s.apiCall(http.MethodGet, "/apitokens", nil, &list)
	require.Empty(t, list.Items, "adding a row creates nothing")

	for _, tc := range []struct {
		name, role, tenants, selector, field string
	}{
		{"wider than the owner", "admin", "acme", "", "spec.bindings[0].role"},
		{"bad selector", "view", "", "team notin", "spec.bindings[0].tenantSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := b.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"bad"},
				"binding.role": {tc.role}, "binding.tenants": {tc.tenants}, "binding.tenantSelector": {tc.selector}})
			require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
			require.Contains(t, p.Body, `data-field-error="`+tc.field+`"`)
			require.Contains(t, p.Body, `data-testid="form-error"`)
		})
	}

	p := b.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"ci"},
		"binding.role": {"view", "view"}, "binding.tenants": {"acme", ""}, "binding.tenantSelector": {"", ""}})
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	m := newTokenPattern.FindStringSubmatch(p.Body)
	require.NotNil(t, m, p.Body)
	require.Contains(t, p.Body, "view on acme")
	var tok domain.APIToken
	s.apiCall(http.MethodGet, "/apitokens/ci", nil, &tok)
	require.Equal(t, []domain.RoleBinding{{Role: "view", Tenants: []string{"acme"}}}, tok.Spec.Bindings)
	require.Contains(t, b.get("/ui/settings/tokens").Body, "view on acme")

	get := func(method, path string) int {
		req, err := http.NewRequest(method, s.srv.URL+"/api/v1"+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+m[1])
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get(http.MethodGet, "/tenants/acme"))
	require.Equal(t, http.StatusNotFound, get(http.MethodGet, "/tenants/beta"), "the owner views beta; the token does not")
	require.Equal(t, http.StatusForbidden, get(http.MethodDelete, "/tenants/acme"), "view on acme, though the owner edits it")
}
