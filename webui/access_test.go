package webui

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// signInBound makes a user with a global role and tenant bindings and signs
// a new browser in as them.
func (s *uiStack) signInBound(name, role string, bindings []map[string]any) *browser {
	s.t.Helper()
	s.apiCall(http.MethodPost, "/users", map[string]any{"apiVersion": domain.APIVersion, "kind": "User",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"role": role, "password": "pw-" + name + "-123456", "bindings": bindings}}, nil)
	return s.login(name, "pw-"+name+"-123456")
}

// login signs a new browser in as an existing user.
func (s *uiStack) login(name, password string) *browser {
	s.t.Helper()
	b := s.newBrowser()
	b.get("/ui/login")
	res := b.form("/ui/login", url.Values{"username": {name}, "password": {password}, "next": {"/ui/"}})
	require.Equal(s.t, http.StatusSeeOther, res.Code, res.Body)
	return b
}

// threeTenants: acme (env=dev, with node groups and machines), beta
// (team=b) and gamma (team=c).
func (s *uiStack) threeTenants() {
	s.t.Helper()
	s.acme()
	s.createTenant("beta", map[string]string{"team": "b"})
	s.create("/tenants/beta/nodegroups", map[string]any{"metadata": map[string]any{"name": "workers"},
		"spec": map[string]any{"role": "worker", "count": 1, "provider": "emu"}})
	s.createTenant("gamma", map[string]string{"team": "c"})
	s.create("/tenants/gamma/machines", map[string]any{"metadata": map[string]any{"name": "g1"},
		"spec": map[string]any{"nodeGroup": "workers", "role": "worker", "address": "10.0.9.1"}})
}

// writeControls are the tenant page's controls for roles that may write.
var writeControls = []string{`data-testid="delete-tenant"`, `data-testid="scale-up"`, `data-testid="scale-down"`,
	`data-testid="edit-nodegroup"`, `id="nodegroup-add"`, `data-testid="new-patch"`, `data-testid="version-forms"`, `data-testid="rotate-forms"`}

// A user with no global role, edit on the tenants labelled env=dev (acme)
// and view on beta by name: the pages show acme's write controls and none of
// beta's; gamma does not exist for them (404), lists leave it out, and the
// server-wide controls (new tenant, users, audit) are not offered.
func TestTenantBoundUserSeesWriteControlsOnItsTenantsOnly(t *testing.T) {
	s := newUIStack(t)
	s.threeTenants()
	b := s.signInBound("tina", domain.RoleNone, []map[string]any{
		{"role": "edit", "tenantSelector": "env=dev"},
		{"role": "view", "tenants": []string{"beta"}},
	})

	acme := b.get("/ui/tenants/acme")
	require.Equal(t, http.StatusOK, acme.Code, acme.Body)
	for _, w := range writeControls {
		assert.Contains(t, acme.Body, w, "acme: edit by the selector binding")
	}
	assert.Contains(t, acme.Body, `data-testid="user-bindings"`)

	beta := b.get("/ui/tenants/beta")
	require.Equal(t, http.StatusOK, beta.Code, beta.Body)
	assert.Contains(t, beta.Body, `data-nodegroup="workers"`)
	assert.NotContains(t, beta.Body, "data-mutating", "beta: view only")
	for _, w := range writeControls {
		assert.NotContains(t, beta.Body, w)
	}

	for _, path := range []string{"/ui/tenants/gamma", "/ui/tenants/gamma/machines/g1", "/ui/tenants/gamma/health",
		"/ui/tenants/gamma/kubeconfig", "/ui/tenants/gamma/patches/new"} {
		p := b.get(path)
		assert.Equal(t, http.StatusNotFound, p.Code, path)
		assert.NotContains(t, p.Body, "10.0.9.1", path)
	}

	list := b.get("/ui/tenants")
	require.Equal(t, http.StatusOK, list.Code)
	assert.Contains(t, list.Body, `data-tenant="acme"`)
	assert.Contains(t, list.Body, `data-tenant="beta"`)
	assert.NotContains(t, list.Body, `data-tenant="gamma"`)
	assert.Contains(t, list.Body, `hx-delete="/ui/tenants/acme"`)
	assert.NotContains(t, list.Body, `hx-delete="/ui/tenants/beta"`)
	assert.NotContains(t, list.Body, `id="tenant-create"`, "creating a tenant needs a global edit")

	dash := b.get("/ui/")
	require.Equal(t, http.StatusOK, dash.Code)
	assert.Contains(t, dash.Body, `data-tenant="acme"`)
	assert.NotContains(t, dash.Body, `data-tenant="gamma"`)
	assert.NotContains(t, dash.Body, `data-testid="new-tenant"`)
	assert.NotContains(t, dash.Body, `id="dash-audit"`)

	settings := b.get("/ui/settings")
	assert.Contains(t, settings.Body, `data-tab="API tokens"`)
	assert.Contains(t, settings.Body, `data-tab="Providers"`, "a tenant's editor picks providers for its node groups")
	assert.NotContains(t, settings.Body, `data-tab="Users"`)
	assert.NotContains(t, settings.Body, `data-tab="Audit log"`)
	assert.Equal(t, http.StatusForbidden, b.get("/ui/settings/audit").Code)
	assert.Equal(t, http.StatusForbidden, b.get("/ui/settings/users").Code)

	t.Run("actions", func(t *testing.T) {
		b.get("/ui/tenants/acme")
		res := b.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers/scale", url.Values{"delta": {"1"}})
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		assert.Equal(t, 3, s.nodeGroup("acme", "workers").Spec.Count)
		assert.Equal(t, http.StatusOK, b.hxGet("/ui/tenants/acme/patches/new").Code)
		assert.Equal(t, http.StatusOK, b.get("/ui/tenants/acme/nodegroups/workers/edit").Code)

		res = b.hx(http.MethodPost, "/ui/tenants/beta/nodegroups/workers/scale", url.Values{"delta": {"1"}})
		assert.Equal(t, http.StatusForbidden, res.Code, res.Body)
		assert.Equal(t, 1, s.nodeGroup("beta", "workers").Spec.Count)
		assert.Equal(t, http.StatusForbidden, b.hxGet("/ui/tenants/beta/patches/new").Code)
		assert.Equal(t, http.StatusForbidden, b.get("/ui/tenants/beta/nodegroups/workers/edit").Code)
		res = b.hx(http.MethodDelete, "/ui/tenants/beta", nil)
		assert.Equal(t, http.StatusForbidden, res.Code)
		res = b.hx(http.MethodDelete, "/ui/tenants/gamma", nil)
		assert.Equal(t, http.StatusNotFound, res.Code)
		res = b.hx(http.MethodPost, "/ui/tenants", url.Values{"metadata.name": {"mine"}})
		assert.Equal(t, http.StatusForbidden, res.Code, res.Body)
	})

	t.Run("labels move acme out of the selector", func(t *testing.T) {
		s.apiCall(http.MethodPatch, "/tenants/acme", map[string]any{"metadata": map[string]any{"labels": map[string]any{"env": "prod"}}}, nil)
		require.Eventually(t, func() bool { return b.get("/ui/tenants/acme").Code == http.StatusNotFound }, 10*time.Second, 5*time.Millisecond)
		assert.NotContains(t, b.get("/ui/tenants").Body, `data-tenant="acme"`)
	})
}

// Bindings only add: a global editor with a view binding on acme still
// writes there; a global viewer with edit on acme writes on acme only.
func TestBindingsOnlyAddToTheGlobalRole(t *testing.T) {
	s := newUIStack(t)
	s.threeTenants()
	editor := s.signInBound("eddie", domain.RoleEdit, []map[string]any{{"role": "view", "tenants": []string{"acme"}}})
	viewer := s.signInBound("vera", domain.RoleView, []map[string]any{{"role": "edit", "tenants": []string{"acme"}}})
	for _, tc := range []struct {
		name     string
		b        *browser
		tenant   string
		writable bool
	}{
		{"editor on acme", editor, "acme", true},
		{"editor on gamma", editor, "gamma", true},
		{"viewer on acme", viewer, "acme", true},
		{"viewer on gamma", viewer, "gamma", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.b.get("/ui/tenants/" + tc.tenant)
			require.Equal(t, http.StatusOK, p.Code, p.Body)
			assert.Equal(t, tc.writable, strings.Contains(p.Body, `data-testid="delete-tenant"`))
			assert.Equal(t, tc.writable, strings.Contains(p.Body, `data-testid="new-patch"`))
		})
	}
	assert.Contains(t, editor.get("/ui/tenants").Body, `id="tenant-create"`)
	assert.NotContains(t, viewer.get("/ui/tenants").Body, `id="tenant-create"`)
	m := viewer.get("/ui/tenants/acme/machines/cp1")
	require.Equal(t, http.StatusOK, m.Code)
	assert.Contains(t, m.Body, `data-testid="machine-config"`, "edit on acme reads its machines' configs")
}

// A tenant's admin (by a binding) gets the audit log, with the records of its
// tenants only, on the dashboard and the audit page.
func TestTenantAdminReadsItsTenantsAudit(t *testing.T) {
	s := newUIStack(t)
	s.threeTenants()
	b := s.signInBound("gail", domain.RoleView, []map[string]any{{"role": "admin", "tenants": []string{"beta"}}})

	settings := b.get("/ui/settings")
	assert.Contains(t, settings.Body, `data-tab="Audit log"`)
	assert.NotContains(t, settings.Body, `data-tab="Users"`)
	var p page
	require.Eventually(t, func() bool {
		p = b.get("/ui/settings/audit")
		return p.Code == http.StatusOK && strings.Contains(p.Body, "POST /api/v1/tenants/beta/nodegroups")
	}, 10*time.Second, 5*time.Millisecond, p.Body)
	assert.NotContains(t, p.Body, "/api/v1/tenants/acme")
	assert.NotContains(t, p.Body, "/api/v1/tenants/gamma")
	assert.NotContains(t, p.Body, "POST /api/v1/providers")

	dash := b.get("/ui/")
	assert.Contains(t, dash.Body, `id="dash-audit"`)
	assert.NotContains(t, dash.Body, "/api/v1/tenants/acme")
}

// liveUntilClosed opens a live stream, calls opened once it answers, and
// reads it until the server closes it; closed is false when it was still
// open after within (a fail-safe: the stream must end on its own).
func (b *browser) liveUntilClosed(path string, within time.Duration, opened func()) (body string, closed bool) {
	b.s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.s.srv.URL+path, nil)
	require.NoError(b.s.t, err)
	resp, err := b.client.Do(req)
	require.NoError(b.s.t, err)
	defer resp.Body.Close()
	require.Equal(b.s.t, http.StatusOK, resp.StatusCode)
	require.Equal(b.s.t, "text/event-stream", resp.Header.Get("Content-Type"))
	opened()
	raw, err := io.ReadAll(resp.Body)
	return string(raw), err == nil
}

// A live page whose access goes ends its stream for good: a last "ended"
// event says why (the page shows it and closes the stream, sse-close), and
// the server closes the stream rather than leaving the browser to reconnect
// over and over. Reconnecting without a session gets the same end, not a
// redirect an EventSource would retry forever.
func TestLiveStreamsEndWhenAccessGoes(t *testing.T) {
	s := newUIStack(t)
	s.threeTenants()
	for _, tc := range []struct {
		name, path string
		change     map[string]any
		want       string
	}{
		{"binding removed", "/ui/live/tenants/acme", map[string]any{"spec": map[string]any{"bindings": nil}}, "Tenant acme is gone"},
		{"role changed", "/ui/live/tenants/acme", map[string]any{"spec": map[string]any{"bindings": []map[string]any{{"role": "view", "tenants": []string{"acme"}}}}},
			"Your role on tenant acme changed (now view)"},
		{"user disabled", "/ui/live/tenants/acme", map[string]any{"spec": map[string]any{"disabled": true}}, `data-testid="live-sign-in"`},
		{"machine out of view", "/ui/live/tenants/acme/machines/cp1", map[string]any{"spec": map[string]any{"bindings": nil}}, "Tenant acme is gone"},
		{"dashboard, user disabled", "/ui/live/dashboard", map[string]any{"spec": map[string]any{"disabled": true}}, `data-testid="live-sign-in"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "live-" + strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), ",", "")
			b := s.signInBound(name, domain.RoleNone, []map[string]any{{"role": "edit", "tenants": []string{"acme"}}})
			body, closed := b.liveUntilClosed(tc.path, 20*time.Second, func() {
				s.apiCall(http.MethodPatch, "/users/"+name, tc.change, nil)
			})
			require.True(t, closed, "the server closes the stream: %s", body)
			require.Contains(t, body, "event: ended\n")
			require.Contains(t, body, `data-testid="live-ended"`)
			require.Contains(t, body, tc.want)
			require.NotContains(t, body, `data-testid="flash-error"`, "no error for each part of a page that is going")
		})
	}

	t.Run("reconnect without a session", func(t *testing.T) {
		b := s.newBrowser()
		body, closed := b.liveUntilClosed("/ui/live/tenants/acme", 20*time.Second, func() {})
		require.True(t, closed)
		require.Contains(t, body, "event: ended\n")
		require.Contains(t, body, `data-testid="live-sign-in"`)
	})

	t.Run("pages close their streams on it", func(t *testing.T) {
		b := s.signIn("live-pages", domain.RoleAdmin)
		for _, path := range []string{"/ui/", "/ui/tenants", "/ui/tenants/acme", "/ui/tenants/acme/machines/cp1"} {
			p := b.get(path)
			require.Equal(t, http.StatusOK, p.Code, path)
			require.Equal(t, strings.Count(p.Body, "sse-connect="), strings.Count(p.Body, `sse-close="ended"`), path)
			require.Equal(t, strings.Count(p.Body, "sse-connect="), strings.Count(p.Body, `sse-swap="ended"`), path)
		}
	})
}
