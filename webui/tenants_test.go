package webui

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (s *uiStack) createProvider(name string) {
	s.t.Helper()
	s.create("/providers", map[string]any{"metadata": map[string]any{"name": name},
		"spec": map[string]any{"type": "emulated", "config": map[string]any{"endpoint": "http://127.0.0.1:1"}}})
}

func (s *uiStack) createTenant(name string, labels map[string]string) {
	s.t.Helper()
	s.create("/tenants", map[string]any{"metadata": map[string]any{"name": name, "labels": labels}, "spec": map[string]any{}})
}

func TestTenantListAndFilter(t *testing.T) {
	s := newUIStack(t)
	s.createTenant("alpha", map[string]string{"env": "dev"})
	s.createTenant("beta", map[string]string{"env": "prod"})
	b := s.signIn("alice", "edit")

	res := b.get("/ui/tenants")
	require.Equal(t, http.StatusOK, res.Code)
	assert.Contains(t, res.Body, `data-tenant="alpha"`)
	assert.Contains(t, res.Body, `data-tenant="beta"`)
	assert.Contains(t, res.Body, `data-testid="tenant-create"`)

	// The filter answers htmx with the rows only.
	res = b.hxGetTarget("/ui/tenants?labelSelector=env%3Dprod", "tenant-rows")
	require.Equal(t, http.StatusOK, res.Code)
	assert.NotContains(t, res.Body, "<html")
	assert.Contains(t, res.Body, `data-tenant="beta"`)
	assert.NotContains(t, res.Body, `data-tenant="alpha"`)

	// A page load with a filter shows the filtered rows and keeps the filter.
	res = b.get("/ui/tenants?labelSelector=env%3Ddev")
	assert.Contains(t, res.Body, `data-tenant="alpha"`)
	assert.NotContains(t, res.Body, `data-tenant="beta"`)
	assert.Contains(t, res.Body, `value="env=dev"`)

	// A bad selector is a 400 with the API's message, not a broken page.
	res = b.hxGetTarget("/ui/tenants?labelSelector=env%3D%3D%3D", "tenant-rows")
	assert.Equal(t, http.StatusBadRequest, res.Code)
	assert.Contains(t, res.Body, `data-testid="flash-error"`)
	assert.Equal(t, http.StatusBadRequest, b.get("/ui/tenants?labelSelector=env%3D%3D%3D").Code)
}

func TestCreateTenantWithNodeGroups(t *testing.T) {
	s := newUIStack(t)
	s.createProvider("emulated")
	b := s.signIn("alice", "edit")
	b.get("/ui/tenants")

	res := b.hx(http.MethodPost, "/ui/tenants", url.Values{"metadata.name": {"demo"}, "metadata.labels": {"env=dev, team=a"},
		"provider": {"emulated"}, "controlPlanes": {"1"}, "workers": {"2"}})
	require.Equal(t, http.StatusCreated, res.Code, res.Body)
	assert.Equal(t, "/ui/tenants/demo", res.Header.Get("HX-Redirect"))

	var tenant domain.Tenant
	s.apiCall(http.MethodGet, "/tenants/demo", nil, &tenant)
	assert.Equal(t, map[string]string{"env": "dev", "team": "a"}, tenant.Metadata.Labels)
	var groups itemList[domain.NodeGroup]
	s.apiCall(http.MethodGet, "/tenants/demo/nodegroups", nil, &groups)
	require.Len(t, groups.Items, 2)
	counts := map[string]int{}
	for _, g := range groups.Items {
		counts[g.Spec.Role] = g.Spec.Count
		assert.Equal(t, "emulated", g.Spec.Provider)
	}
	assert.Equal(t, map[string]int{"controlplane": 1, "worker": 2}, counts)
	var audit itemList[map[string]any]
	s.apiCall(http.MethodGet, "/audit?actor=alice", nil, &audit)
	assert.NotEmpty(t, audit.Items, "the API audited the UI's writes as the user")
}

func TestCreateTenantShowsErrorsNextToFields(t *testing.T) {
	s := newUIStack(t)
	s.createProvider("emulated")
	s.createTenant("taken", nil)
	b := s.signIn("alice", "edit")
	b.get("/ui/tenants")
	cases := []struct {
		name  string
		form  url.Values
		code  int
		field string
	}{
		{"bad name", url.Values{"metadata.name": {"Bad_Name"}}, http.StatusUnprocessableEntity, "metadata.name"},
		{"bad version", url.Values{"metadata.name": {"ok"}, "spec.talosVersion": {"one"}}, http.StatusUnprocessableEntity, "spec.talosVersion"},
		{"bad labels", url.Values{"metadata.name": {"ok"}, "metadata.labels": {"novalue"}}, http.StatusUnprocessableEntity, "metadata.labels"},
		{"bad label key", url.Values{"metadata.name": {"ok"}, "metadata.labels": {"-x-=1"}}, http.StatusUnprocessableEntity, "metadata.labels"},
		{"even control planes", url.Values{"metadata.name": {"ok"}, "provider": {"emulated"}, "controlPlanes": {"2"}}, http.StatusUnprocessableEntity, "controlPlanes"},
		{"no control plane", url.Values{"metadata.name": {"ok"}, "provider": {"emulated"}, "controlPlanes": {"0"}, "workers": {"1"}}, http.StatusUnprocessableEntity, "controlPlanes"},
		{"bad workers", url.Values{"metadata.name": {"ok"}, "provider": {"emulated"}, "controlPlanes": {"1"}, "workers": {"x"}}, http.StatusUnprocessableEntity, "workers"},
		{"exists", url.Values{"metadata.name": {"taken"}}, http.StatusConflict, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := b.hx(http.MethodPost, "/ui/tenants", tc.form)
			assert.Equal(t, tc.code, res.Code, res.Body)
			assert.Contains(t, res.Body, `id="tenant-create"`, "the form comes back to be corrected")
			assert.Contains(t, res.Body, `data-testid="form-error"`)
			if tc.field != "" {
				assert.Contains(t, res.Body, `data-field-error="`+tc.field+`"`)
			}
			assert.Empty(t, res.Header.Get("HX-Redirect"))
		})
	}
	var tenants itemList[domain.Tenant]
	s.apiCall(http.MethodGet, "/tenants", nil, &tenants)
	assert.Len(t, tenants.Items, 1, "no refused form left a tenant behind")
}

func TestViewUserCannotChangeTenants(t *testing.T) {
	s := newUIStack(t)
	s.createTenant("alpha", nil)
	b := s.signIn("victor", "view")
	for _, path := range []string{"/ui/", "/ui/tenants"} {
		res := b.get(path)
		require.Equal(t, http.StatusOK, res.Code, path)
		assert.NotContains(t, res.Body, "data-mutating", path)
		assert.Contains(t, res.Body, `data-testid="user-role">view<`)
	}
	res := b.hx(http.MethodPost, "/ui/tenants", url.Values{"metadata.name": {"mine"}})
	assert.Equal(t, http.StatusForbidden, res.Code)
	res = b.hx(http.MethodDelete, "/ui/tenants/alpha", nil)
	assert.Equal(t, http.StatusForbidden, res.Code)
	assert.Equal(t, "#flash", res.Header.Get("HX-Retarget"))
	assert.Contains(t, res.Body, "may not delete")
	code, _ := s.apiRaw(http.MethodGet, "/tenants/alpha", nil)
	assert.Equal(t, http.StatusOK, code)
}

func TestDeleteTenant(t *testing.T) {
	s := newUIStack(t)
	s.createTenant("alpha", nil)
	b := s.signIn("alice", "edit")
	b.get("/ui/tenants")
	res := b.hxTarget(http.MethodDelete, "/ui/tenants/alpha", "flash")
	require.Equal(t, http.StatusOK, res.Code, res.Body)
	assert.Contains(t, res.Body, "Deletion of tenant alpha requested")
	require.Eventually(t, func() bool {
		code, _ := s.apiRaw(http.MethodGet, "/tenants/alpha", nil)
		return code == http.StatusNotFound
	}, 10*time.Second, 5*time.Millisecond)
	res = b.hxTarget(http.MethodDelete, "/ui/tenants/alpha", "flash")
	assert.Equal(t, http.StatusNotFound, res.Code)
}

func TestTenantListIsLive(t *testing.T) {
	s := newUIStack(t)
	b := s.signIn("alice", "view")
	// The stream sends the current rows on connect; the tenant created
	// afterwards must arrive as a change.
	sawEmpty, sawNew := false, false
	ok := b.liveEvents("/ui/live/tenants", 15*time.Second, func(event, data string) bool {
		require.Equal(t, "tenants", event)
		if !sawEmpty && strings.Contains(data, "No tenants match") {
			sawEmpty = true
			s.createTenant("fresh", map[string]string{"env": "dev"})
		}
		sawNew = strings.Contains(data, `data-tenant="fresh"`)
		return sawNew
	})
	assert.True(t, ok && sawEmpty && sawNew)
}

func TestDashboard(t *testing.T) {
	s := newUIStack(t)
	s.createTenant("alpha", nil)
	admin := s.signIn("ada", "admin")
	res := admin.get("/ui/")
	require.Equal(t, http.StatusOK, res.Code)
	for _, want := range []string{`sse-connect="/ui/live/dashboard?seen=fleet%3A`, `sse-swap="fleet"`, `data-testid="fleet-tenants">1<`, `data-testid="fleet-rollouts"`, `sse-swap="applies"`, `sse-swap="upgrades"`, `sse-swap="audit"`, `data-tenant="alpha"`, "POST /api/v1/auth/login"} {
		assert.Contains(t, res.Body, want)
	}
	// The audit log is for admins.
	viewer := s.signIn("victor", "view")
	res = viewer.get("/ui/")
	require.Equal(t, http.StatusOK, res.Code)
	assert.NotContains(t, res.Body, `sse-swap="audit"`)

	// A change reaches the dashboard: a new tenant, and (admins) its audit entry.
	events := map[string]string{}
	created := false
	ok := admin.liveEvents("/ui/live/dashboard", 15*time.Second, func(event, data string) bool {
		events[event] = data
		if !created && len(events) == 4 {
			created = true
			s.createTenant("beta", nil)
		}
		return strings.Contains(events["fleet"], `data-tenant="beta"`) && strings.Contains(events["fleet"], `data-testid="fleet-tenants">2<`) &&
			strings.Contains(events["audit"], "/api/v1/tenants")
	})
	assert.True(t, ok, "events: %v", events)

	ok = viewer.liveEvents("/ui/live/dashboard", 5*time.Second, func(event, data string) bool {
		return event == "audit" && data == "\n"
	})
	assert.True(t, ok, "a viewer's audit fragment is empty")
}

func TestDashboardShowsApplies(t *testing.T) {
	s := newUIStack(t)
	s.createTenant("alpha", nil)
	// Applies and upgrades are written by controllers, not through the API.
	s.record(domain.ApplyKind, "alpha", "apply-1", domain.ApplySpec{Operation: "apply", Trigger: "change", Generation: 1},
		domain.ApplyStatus{Phase: domain.ApplyFailed, Resources: domain.ApplyResources{Added: 3}})
	b := s.signIn("victor", "view")
	res := b.get("/ui/")
	require.Equal(t, http.StatusOK, res.Code)
	assert.Contains(t, res.Body, `data-apply="apply-1"`)
	assert.Contains(t, res.Body, `data-phase="Failed"`)
	assert.Contains(t, res.Body, "3/0/0")
}

// A live stream opened with what the page was rendered with (seen=) sends
// only what changed since: the page's buttons are not replaced on connect.
func TestLiveSendsOnlyWhatChanged(t *testing.T) {
	s := newUIStack(t)
	s.createTenant("alpha", nil)
	b := s.signIn("victor", "view")
	page := b.get("/ui/tenants")
	require.Equal(t, http.StatusOK, page.Code)
	m := regexp.MustCompile(`sse-connect="(/ui/live/tenants\?seen=[^"]+)"`).FindStringSubmatch(page.Body)
	require.NotNil(t, m, "the page opens its stream with what it shows")
	live := strings.ReplaceAll(m[1], "&amp;", "&")

	var first string
	created := false
	ok := b.liveEventsOpen(live, 15*time.Second, func() {
		// Nothing was sent on connect (the page is current); now a change.
		created = true
		s.createTenant("beta", nil)
	}, func(event, data string) bool {
		first = data
		return true
	})
	require.True(t, ok)
	assert.True(t, created, "the first event came only after the change")
	assert.Contains(t, first, `data-tenant="beta"`)
}
