package webui

import (
	"net/http"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestUpgradeStartForm(t *testing.T) {
	clock := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	s := newOpsStackAt(t, func() time.Time { return clock })
	opsAcme(s)
	b := s.signIn("ed", domain.RoleEdit)

	tests := []struct {
		name   string
		values url.Values
		field  string
		msg    string
	}{
		{"no version", url.Values{"talosVersion": {""}}, "spec.talosVersion", "required"},
		{"not a version", url.Values{"talosVersion": {"latest"}}, "spec.talosVersion", "not a semantic version"},
		{"a skipped minor version", url.Values{"talosVersion": {"v1.14.0"}}, "spec.talosVersion", "skips a minor version"},
		{"a downgrade", url.Values{"talosVersion": {"v1.11.3"}, "nodeGroups": {"workers"}}, "spec.talosVersion", "machines w-1 run v1.12.0"},
		{"an unknown node group", url.Values{"talosVersion": {"v1.13.0"}, "nodeGroups": {"gpu"}}, "spec.nodeGroups", `node group &#34;gpu&#34; does not exist`},
		{"a parallelism that is no number", url.Values{"talosVersion": {"v1.13.0"}, "maxParallelism": {"many"}}, "spec.maxParallelism", "whole number"},
		{"a parallelism out of range", url.Values{"talosVersion": {"v1.13.0"}, "maxParallelism": {"-1"}}, "spec.maxParallelism", "between 1 and"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := b.hx(http.MethodPost, "/ui/tenants/acme/upgrades", tc.values)
			require.Equal(t, http.StatusUnprocessableEntity, r.Code, r.Body)
			require.Contains(t, r.Body, `data-testid="upgrade-form"`, "the form comes back")
			require.Contains(t, r.Body, `data-field-error="`+tc.field+`"`, r.Body)
			require.Contains(t, r.Body, tc.msg)
			require.Contains(t, r.Body, `value="`+tc.values.Get("talosVersion")+`"`, "what was typed is kept")
		})
	}
	var l itemList[domain.Upgrade]
	s.apiCall(http.MethodGet, "/tenants/acme/upgrades", nil, &l)
	require.Empty(t, l.Items)

	// A good one; a second in the same second gets its own name.
	r := b.hx(http.MethodPost, "/ui/tenants/acme/upgrades", url.Values{"talosVersion": {"1.13.0"}, "nodeGroups": {"workers"}, "maxParallelism": {"2"}})
	require.Equal(t, http.StatusCreated, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-ok"`)
	require.Contains(t, r.Body, `data-testid="upgrade-form"`, "a fresh form follows")
	require.NotContains(t, r.Body, `value="1.13.0"`)
	r = b.hx(http.MethodPost, "/ui/tenants/acme/upgrades", url.Values{"talosVersion": {"v1.12.1"}})
	require.Equal(t, http.StatusCreated, r.Code, r.Body)
	s.apiCall(http.MethodGet, "/tenants/acme/upgrades", nil, &l)
	require.Len(t, l.Items, 2)
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Metadata.Name < l.Items[j].Metadata.Name })
	require.Equal(t, "upgrade-20260304-050607", l.Items[0].Metadata.Name)
	require.Equal(t, domain.UpgradeSpec{TalosVersion: "v1.13.0", NodeGroups: []string{"workers"}, MaxParallelism: 2}, l.Items[0].Spec)
	require.Equal(t, "upgrade-20260304-050607-2", l.Items[1].Metadata.Name)
	require.Equal(t, domain.UpgradeSpec{TalosVersion: "v1.12.1", MaxParallelism: 1}, l.Items[1].Spec)

	// Without htmx the form posts and comes back to the tenant, or shows the
	// refusal on a page.
	b.get("/ui/test/ops/acme") // for the CSRF token
	page := b.form("/ui/tenants/acme/upgrades", url.Values{"talosVersion": {"bogus"}})
	require.Equal(t, http.StatusUnprocessableEntity, page.Code)
	require.Contains(t, page.Body, "<html")
	require.Contains(t, page.Body, `data-field-error="spec.talosVersion"`)
	clock = clock.Add(time.Hour)
	page = b.form("/ui/tenants/acme/upgrades", url.Values{"talosVersion": {"v1.12.2"}})
	require.Equal(t, http.StatusSeeOther, page.Code, page.Body)
	require.Equal(t, "/ui/tenants/acme#upgrades", page.Header.Get("Location"))

	viewer := s.signIn("vi", domain.RoleView)
	r = viewer.hx(http.MethodPost, "/ui/tenants/acme/upgrades", url.Values{"talosVersion": {"v1.13.0"}})
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-error"`)
}

func TestUpgradeTableShowsMachineProgress(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	var up domain.Object
	s.apiCall(http.MethodPost, "/tenants/acme/upgrades", map[string]any{"metadata": map[string]any{"name": "to-113"},
		"spec": map[string]any{"talosVersion": "v1.13.0"}}, &up)
	editor := s.signIn("ed", domain.RoleEdit)
	rows := editor.liveEventWith("/ui/test/live/ops/acme", "upgrades", 10*time.Second, `data-upgrade="to-113"`)
	require.Contains(t, rows, `data-phase="Pending"`)
	require.Contains(t, rows, `<span data-testid="upgrade-progress">0/0</span>`)

	// The saga's progress, written as it writes it.
	s.apiCall(http.MethodPut, "/tenants/acme/upgrades/to-113/status", map[string]any{
		"metadata": map[string]any{"resourceVersion": up.Metadata.ResourceVersion},
		"status": map[string]any{"phase": "Running", "current": "w-1", "machines": []map[string]any{
			{"name": "cp-1", "nodeGroup": "cp", "role": "controlplane", "from": "v1.12.0", "to": "v1.13.0", "phase": "Done"},
			{"name": "w-1", "nodeGroup": "workers", "role": "worker", "from": "v1.12.0", "to": "v1.13.0", "phase": "Failed",
				"error": "node did not come back; rolled back"},
		}}}, nil)
	rows = editor.liveEventWith("/ui/test/live/ops/acme", "upgrades", 10*time.Second, `data-upgrade-machine="w-1"`)
	require.Contains(t, rows, `data-upgrade-machine="cp-1"`)
	require.Contains(t, rows, `<span data-testid="upgrade-progress">2/2</span>`)
	require.Contains(t, rows, `data-phase="Running"`)
	require.Contains(t, rows, `data-phase="Done"`)
	require.Contains(t, rows, `data-phase="Failed"`)
	require.Contains(t, rows, "v1.12.0 → v1.13.0")
	require.Contains(t, rows, "node did not come back; rolled back")
	require.Contains(t, rows, "upgrading w-1")
	require.Contains(t, rows, `data-testid="cancel-upgrade"`)

	viewer := s.signIn("vi", domain.RoleView)
	rows = viewer.liveEventWith("/ui/test/live/ops/acme", "upgrades", 10*time.Second, `data-upgrade-machine="w-1"`)
	require.NotContains(t, rows, "data-mutating")
	r := viewer.hx(http.MethodPost, "/ui/tenants/acme/upgrades/to-113/cancel", nil)
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)

	r = editor.hx(http.MethodPost, "/ui/tenants/acme/upgrades/to-113/cancel", nil)
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="cancel-requested"`)
	require.NotContains(t, r.Body, `data-testid="cancel-upgrade"`)
	var got domain.Upgrade
	s.apiCall(http.MethodGet, "/tenants/acme/upgrades/to-113", nil, &got)
	require.True(t, got.Spec.CancelRequested)

	r = editor.hx(http.MethodPost, "/ui/tenants/acme/upgrades/nope/cancel", nil)
	require.Equal(t, http.StatusNotFound, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-error"`)
}
