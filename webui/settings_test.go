package webui

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSettingsIndexShowsTabsByRole(t *testing.T) {
	s := newUIStack(t)
	for _, tc := range []struct {
		role      string
		adminTabs bool
	}{{"admin", true}, {"edit", false}, {"view", false}} {
		t.Run(tc.role, func(t *testing.T) {
			b := s.signIn("idx-"+tc.role, tc.role)
			p := b.get("/ui/settings")
			require.Equal(t, http.StatusOK, p.Code, p.Body)
			require.Contains(t, p.Body, `data-tab="API tokens"`)
			require.Contains(t, p.Body, `data-tab="Providers"`)
			require.Contains(t, p.Body, `data-testid="own-password"`)
			for _, admin := range []string{`data-tab="Users"`, `data-tab="Audit log"`, `data-section="Users"`, `data-section="Audit log"`} {
				if tc.adminTabs {
					require.Contains(t, p.Body, admin)
				} else {
					require.NotContains(t, p.Body, admin)
				}
			}
		})
	}
}

func TestSettingsAdminSectionsRefuseOtherRoles(t *testing.T) {
	s := newUIStack(t)
	s.create("/providers", map[string]any{"apiVersion": "rezuscloud.io/v1", "kind": "Provider",
		"metadata": map[string]any{"name": "emu"}, "spec": map[string]any{"type": "emulated", "config": map[string]any{"endpoint": "http://127.0.0.1:1"}}})
	s.createUser("victim", "view", "pw-victim-123456")
	for _, role := range []string{"edit", "view"} {
		t.Run(role, func(t *testing.T) {
			b := s.signIn("guard-"+role, role)
			for _, path := range []string{"/ui/settings/users", "/ui/settings/audit"} {
				p := b.get(path)
				require.Equal(t, http.StatusForbidden, p.Code, path)
				require.Contains(t, p.Body, `data-testid="error-message"`)
				require.Equal(t, http.StatusForbidden, b.hxGet(path).Code, path)
			}
			providers := b.get("/ui/settings/providers")
			require.Equal(t, http.StatusOK, providers.Code)
			require.Contains(t, providers.Body, `data-provider="emu"`)
			require.NotContains(t, providers.Body, "data-mutating", "nothing on the providers page is for this role")
			require.NotContains(t, providers.Body, `data-testid="provider-credentials"`)

			for _, req := range []struct {
				method, path string
				form         url.Values
			}{
				{http.MethodPost, "/ui/settings/users", url.Values{"metadata.name": {"intruder"}, "spec.role": {"admin"}, "spec.password": {"long-enough-password"}}},
				{http.MethodPut, "/ui/settings/users/victim", url.Values{"spec.disabled": {"true"}}},
				{http.MethodPut, "/ui/settings/users/victim", url.Values{"form": {"edit"}, "spec.role": {"admin"}}},
				{http.MethodPut, "/ui/settings/users/victim/password", url.Values{"password": {"another-long-password"}}},
				{http.MethodDelete, "/ui/settings/users/victim", nil},
				{http.MethodPost, "/ui/settings/providers", url.Values{"metadata.name": {"sneaky"}, "spec.type": {"emulated"}, "spec.config": {`{"endpoint":"http://127.0.0.1:1"}`}}},
				{http.MethodDelete, "/ui/settings/providers/emu", nil},
				{http.MethodPut, "/ui/settings/credentials", url.Values{"metadata.name": {"creds"}, "data": {"OS_PASSWORD=x"}}},
			} {
				p := b.hx(req.method, req.path, req.form)
				require.Equal(t, http.StatusForbidden, p.Code, "%s %s: %s", req.method, req.path, p.Body)
				require.Equal(t, "#flash", p.Header.Get("HX-Retarget"))
			}
			code, _ := s.apiRaw(http.MethodGet, "/users/intruder", nil)
			require.Equal(t, http.StatusNotFound, code)
			code, _ = s.apiRaw(http.MethodGet, "/providers/emu", nil)
			require.Equal(t, http.StatusOK, code)
		})
	}
}

func TestSettingsRequiresSignIn(t *testing.T) {
	s := newUIStack(t)
	b := s.newBrowser()
	for _, path := range []string{"/ui/settings", "/ui/settings/tokens", "/ui/settings/users", "/ui/settings/audit"} {
		p := b.get(path)
		require.Equal(t, http.StatusSeeOther, p.Code, path)
		require.Contains(t, p.Header.Get("Location"), "/ui/login")
	}
}

func TestSettingsOwnPassword(t *testing.T) {
	s := newUIStack(t)
	b := s.signIn("self", "view")
	b.get("/ui/settings")

	wrong := b.hx(http.MethodPut, "/ui/settings/password", url.Values{"currentPassword": {"not-my-password"}, "password": {"a-brand-new-password"}})
	require.Equal(t, http.StatusUnprocessableEntity, wrong.Code, wrong.Body)
	require.Contains(t, wrong.Body, `data-field-error="currentPassword"`)

	weak := b.hx(http.MethodPut, "/ui/settings/password", url.Values{"currentPassword": {"pw-self-123456"}, "password": {"short"}})
	require.Equal(t, http.StatusUnprocessableEntity, weak.Code, weak.Body)
	require.Contains(t, weak.Body, `data-field-error="password"`)

	ok := b.hx(http.MethodPut, "/ui/settings/password", url.Values{"currentPassword": {"pw-self-123456"}, "password": {"a-brand-new-password"}})
	require.Equal(t, http.StatusOK, ok.Code, ok.Body)
	require.Contains(t, ok.Body, "Your password was changed")
	require.True(t, settingsCanSignIn(s, "self", "a-brand-new-password"))
	require.False(t, settingsCanSignIn(s, "self", "pw-self-123456"))

	// Another user's password is not the viewer's to change through this form
	// or the admin one.
	s.createUser("other", "view", "pw-other-123456")
	p := b.hx(http.MethodPut, "/ui/settings/users/other/password", url.Values{"password": {"hijacked-password-1"}})
	require.Equal(t, http.StatusForbidden, p.Code, p.Body)
	require.True(t, settingsCanSignIn(s, "other", "pw-other-123456"))
}

// settingsCanSignIn reports whether a fresh browser can sign in with the password.
func settingsCanSignIn(s *uiStack, name, password string) bool {
	s.t.Helper()
	b := s.newBrowser()
	b.get("/ui/login")
	res := b.form("/ui/login", url.Values{"username": {name}, "password": {password}, "next": {"/ui/"}})
	return res.Code == http.StatusSeeOther
}
