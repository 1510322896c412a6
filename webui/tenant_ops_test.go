package webui

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// newOpsStack is newUIStack whose UI also serves a bare test page holding the
// three tenant panels, /ui/test/ops/:tenant, inside its live stream,
// /ui/test/live/ops/:tenant, the way the tenant page embeds them.
func newOpsStack(t *testing.T) *uiStack {
	t.Helper()
	return newOpsStackAt(t, time.Now)
}

// newOpsStackAt is newOpsStack with the UI's clock.
func newOpsStackAt(t *testing.T, now func() time.Time) *uiStack {
	t.Helper()
	s := newUIStack(t)
	ui := New(Config{LiveDebounce: 20 * time.Millisecond, Now: now}, Deps{API: s.api.Handler(), Identity: s.identity, Cache: s.cache})
	p := &pages{e: ui.echo, mw: []echo.MiddlewareFunc{ui.authenticate, ui.checkCSRF}}
	p.GET("/test/ops/:tenant", func(c echo.Context) error {
		tenant := c.Param("tenant")
		patches, applies, upgrades, backups, remediations, err := ui.tenantOpsPanels(c, tenant)
		if err != nil {
			return ui.fail(c, err)
		}
		return render(c, http.StatusOK, opsTestPage(viewerOf(c), tenant, patches, applies, upgrades, backups, remediations))
	})
	p.GET("/test/live/ops/:tenant", func(c echo.Context) error {
		return ui.live(c, tenantSubjects(c.Param("tenant")), ui.tenantOpsFragments(c.Param("tenant"))...)
	})
	srv := httptest.NewServer(ui.Handler(s.api.Handler()))
	old := s.srv
	s.srv = srv
	t.Cleanup(func() {
		ui.Close()
		srv.Close()
		s.srv = old
	})
	return s
}

// opsTestPage is the panels inside one live connection, as on the tenant page.
func opsTestPage(v viewer, tenant string, parts ...templ.Component) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		fmt.Fprintf(w, `<!DOCTYPE html><body hx-headers='%s'><div id="flash"></div><div hx-ext="sse" sse-connect="/ui/test/live/ops/%s">`,
			templ.EscapeString(csrfHeaders(v.CSRF)), templ.EscapeString(tenant))
		for _, p := range parts {
			if err := p.Render(ctx, w); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, `</div></body>`)
		return err
	})
}

// opsAcme makes tenant acme with a control-plane group "cp" and a worker
// group "workers", one machine in each, both observed on v1.12.0.
func opsAcme(s *uiStack) {
	s.t.Helper()
	s.createProvider("emu")
	s.create("/tenants", map[string]any{"apiVersion": domain.APIVersion, "kind": "Tenant",
		"metadata": map[string]any{"name": "acme"}, "spec": map[string]any{"talosVersion": "v1.12.0"}})
	for _, g := range []struct{ name, role string }{{"cp", domain.RoleControlPlane}, {"workers", domain.RoleWorker}} {
		s.create("/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": g.name},
			"spec": map[string]any{"role": g.role, "count": 1, "provider": "emu"}})
	}
	for _, m := range []struct{ name, group, role, addr string }{
		{"cp-1", "cp", domain.RoleControlPlane, "10.0.0.10"}, {"w-1", "workers", domain.RoleWorker, "10.0.0.21"}} {
		var obj domain.Object
		s.apiCall(http.MethodPost, "/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": m.name},
			"spec": map[string]any{"nodeGroup": m.group, "role": m.role, "address": m.addr}}, &obj)
		s.apiCall(http.MethodPut, "/tenants/acme/machines/"+m.name+"/status", map[string]any{
			"metadata": map[string]any{"resourceVersion": obj.Metadata.ResourceVersion},
			"status":   map[string]any{"stage": "Running", "ready": true, "talosVersion": "v1.12.0"}}, nil)
	}
}

// liveEventWith waits for the live stream at path to send event with data
// containing all of want, and returns that data.
func (b *browser) liveEventWith(path, event string, within time.Duration, want ...string) string {
	b.s.t.Helper()
	var got, last string
	ok := b.liveEvents(path, within, func(e, data string) bool {
		if e != event {
			return false
		}
		last = data
		for _, w := range want {
			if !strings.Contains(data, w) {
				return false
			}
		}
		got = data
		return true
	})
	require.True(b.s.t, ok, "no %q event with %q on %s; last one:\n%s", event, want, path, last)
	return got
}

func TestOpsPanelsRenderForEachRole(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	s.create("/tenants/acme/configpatches", map[string]any{"metadata": map[string]any{"name": "sysctl"},
		"spec": map[string]any{"patch": "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"}})

	editor := s.signIn("ed", domain.RoleEdit)
	page := editor.get("/ui/test/ops/acme")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	for _, want := range []string{`sse-swap="patches"`, `sse-swap="applies"`, `sse-swap="upgrades"`, `data-patch="sysctl"`,
		`data-testid="upgrade-form"`, `name="talosVersion"`, `placeholder="v1.12.0"`, `data-testid="start-upgrade"`,
		`data-testid="kubernetes-upgrade-form"`, `name="kubernetesVersion"`, `data-testid="start-kubernetes-upgrade"`,
		`data-testid="new-patch"`, `data-testid="preview-patch"`} {
		require.Contains(t, page.Body, want)
	}
	// No form the user types into is inside a live element: every form comes
	// after the last sse-swap element closes or outside it. The version forms
	// are rendered after the upgrades table's live element.
	require.Greater(t, strings.Index(page.Body, `data-testid="version-forms"`), strings.Index(page.Body, `sse-swap="upgrades"`))

	viewer := s.signIn("vi", domain.RoleView)
	page = viewer.get("/ui/test/ops/acme")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.Contains(t, page.Body, `data-patch="sysctl"`)
	require.NotContains(t, page.Body, "data-mutating")
	require.NotContains(t, page.Body, `data-testid="preview-patch"`)

	// The live fragments too, for a viewer: all three, none with an action.
	seen := map[string]string{}
	viewer.liveEvents("/ui/test/live/ops/acme", 10*time.Second, func(e, data string) bool {
		seen[e] = data
		return len(seen) == 3
	})
	require.Len(t, seen, 3)
	for e, data := range seen {
		require.NotContains(t, data, "data-mutating", e)
	}
	require.Contains(t, seen["patches"], `data-patch="sysctl"`)
	require.Contains(t, seen["applies"], "No applies yet")
	require.Contains(t, seen["upgrades"], "No upgrades yet")
}
