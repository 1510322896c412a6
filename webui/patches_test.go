package webui

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

var patchRVPattern = regexp.MustCompile(`name="metadata.resourceVersion" value="([^"]+)"`)

func patchValues(name, targetKind, targetName, format, patch string, enabled bool) url.Values {
	v := url.Values{"metadata.name": {name}, "spec.target.kind": {targetKind}, "spec.target.name": {targetName},
		"spec.format": {format}, "spec.patch": {patch}, "spec.weight": {"0"}}
	if enabled {
		v.Set("spec.enabled", "true")
	}
	return v
}

func TestPatchEditorCreatesEditsTogglesDeletes(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	b := s.signIn("ed", domain.RoleEdit)

	form := b.hxGet("/ui/tenants/acme/patches/new")
	require.Equal(t, http.StatusOK, form.Code, form.Body)
	require.Contains(t, form.Body, `data-testid="patch-form"`)
	require.Contains(t, form.Body, `hx-post="/ui/tenants/acme/patches"`)
	require.Contains(t, form.Body, `<option value="cp-1">`, "machines are suggested as targets")
	require.NotContains(t, form.Body, "<html", "htmx gets the form alone")
	// Without htmx the editor is a page.
	page := b.get("/ui/tenants/acme/patches/new")
	require.Equal(t, http.StatusOK, page.Code)
	require.Contains(t, page.Body, "<html")

	t.Run("impact before the create", func(t *testing.T) {
		v := patchValues("labels", "role", "worker", "strategic", "machine:\n  nodeLabels:\n    tier: web\n", true)
		v.Set("preview", "impact")
		r := b.hx(http.MethodPost, "/ui/tenants/acme/patches", v)
		require.Eventually(t, func() bool { // the tenant's PKI comes a moment after it
			r = b.hx(http.MethodPost, "/ui/tenants/acme/patches", v)
			return !strings.Contains(r.Body, "impact-unknown")
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, http.StatusOK, r.Code, r.Body)
		require.Contains(t, r.Body, `data-impact-machine="w-1" data-impact-action="reconfigure"`)
		require.NotContains(t, r.Body, `data-impact-machine="cp-1"`, "the control plane is not a worker")
		require.Contains(t, r.Body, "tier: web", "the editor keeps the text for the Save")
		require.Equal(t, http.StatusNotFound, b.get("/ui/tenants/acme/patches/labels/edit").Code, "nothing created")
	})

	t.Run("refusals are shown next to their fields", func(t *testing.T) {
		tests := []struct {
			name   string
			values url.Values
			code   int
			field  string
			msg    string
		}{
			{"a patch machinery cannot apply", patchValues("bad", "all", "", "strategic", "machine:\n  type: banana\n", true),
				http.StatusUnprocessableEntity, "spec.patch", "banana"},
			{"a broken JSON 6902 patch", patchValues("bad", "all", "", "json6902", `[{"op":"jump","path":"/machine"}]`, true),
				http.StatusUnprocessableEntity, "spec.patch", "not an RFC 6902 operation"},
			{"an empty patch", patchValues("bad", "all", "", "strategic", "  ", true),
				http.StatusUnprocessableEntity, "spec.patch", "required"},
			{"a bad role", patchValues("bad", "role", "gpu", "strategic", "machine: {}\n", true),
				http.StatusUnprocessableEntity, "spec.target.name", "gpu"},
			{"a bad name", patchValues("Bad_Name", "all", "", "strategic", "machine: {}\n", true),
				http.StatusUnprocessableEntity, "metadata.name", ""},
			{"a weight that is no number", func() url.Values {
				v := patchValues("bad", "all", "", "strategic", "machine: {}\n", true)
				v.Set("spec.weight", "heavy")
				return v
			}(), http.StatusUnprocessableEntity, "spec.weight", "whole number"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := b.hx(http.MethodPost, "/ui/tenants/acme/patches", tc.values)
				require.Equal(t, tc.code, r.Code, r.Body)
				require.Contains(t, r.Body, `data-field-error="`+tc.field+`"`, r.Body)
				require.Contains(t, r.Body, tc.msg)
				require.Contains(t, r.Body, `data-testid="form-error"`)
				require.Contains(t, r.Body, "spec.patch", "the form comes back")
			})
		}
		require.Equal(t, http.StatusNotFound, func() int { c, _ := s.apiRaw(http.MethodGet, "/tenants/acme/configpatches/bad", nil); return c }())
	})

	// A good one, with Windows line breaks as a browser sends them.
	r := b.hx(http.MethodPost, "/ui/tenants/acme/patches",
		patchValues("sysctl", "role", "worker", "strategic", "machine:\r\n  sysctls:\r\n    vm.max_map_count: \"262144\"\r\n", false))
	require.Equal(t, http.StatusCreated, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-ok"`)
	var p domain.ConfigPatch
	s.apiCall(http.MethodGet, "/tenants/acme/configpatches/sysctl", nil, &p)
	require.Equal(t, "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n", p.Spec.Patch)
	require.Equal(t, domain.PatchTarget{Kind: "role", Name: "worker"}, p.Spec.Target)
	require.False(t, *p.Spec.Enabled)
	// A second one by the same name is refused on the form.
	r = b.hx(http.MethodPost, "/ui/tenants/acme/patches", patchValues("sysctl", "all", "", "strategic", "machine: {}\n", true))
	require.Equal(t, http.StatusConflict, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="form-error"`)

	// The live table shows it, disabled, with its actions.
	rows := b.liveEventWith("/ui/test/live/ops/acme", "patches", 10*time.Second, `data-patch="sysctl"`)
	require.Contains(t, rows, "disabled")
	require.Contains(t, rows, "role worker")
	require.Contains(t, rows, `data-testid="toggle-patch"`)

	t.Run("edit", func(t *testing.T) {
		edit := b.hxGet("/ui/tenants/acme/patches/sysctl/edit")
		require.Equal(t, http.StatusOK, edit.Code, edit.Body)
		require.Contains(t, edit.Body, `hx-post="/ui/tenants/acme/patches/sysctl"`)
		require.Contains(t, edit.Body, "vm.max_map_count")
		m := patchRVPattern.FindStringSubmatch(edit.Body)
		require.NotNil(t, m, edit.Body)
		rv := m[1]

		// Someone else changes it meanwhile: the stale edit is refused with 409,
		// the user's text kept and the form now holding the new version.
		s.apiCall(http.MethodPatch, "/tenants/acme/configpatches/sysctl", map[string]any{"spec": map[string]any{"weight": 5}}, nil)
		v := patchValues("", "role", "worker", "strategic", "machine:\n  sysctls:\n    vm.swappiness: \"10\"\n", false)
		v.Set("metadata.resourceVersion", rv)
		r := b.hx(http.MethodPost, "/ui/tenants/acme/patches/sysctl", v)
		require.Equal(t, http.StatusConflict, r.Code, r.Body)
		require.Contains(t, r.Body, `data-testid="form-error"`)
		require.Contains(t, r.Body, "modified")
		require.Contains(t, r.Body, "vm.swappiness")
		m = patchRVPattern.FindStringSubmatch(r.Body)
		require.NotNil(t, m)
		require.NotEqual(t, rv, m[1])

		// Sent again on the fresh version it is saved, labels kept.
		v.Set("metadata.resourceVersion", m[1])
		r = b.hx(http.MethodPost, "/ui/tenants/acme/patches/sysctl", v)
		require.Equal(t, http.StatusOK, r.Code, r.Body)
		require.Contains(t, r.Body, `data-testid="flash-ok"`)
		s.apiCall(http.MethodGet, "/tenants/acme/configpatches/sysctl", nil, &p)
		require.Contains(t, p.Spec.Patch, "vm.swappiness")
		require.Equal(t, int64(3), p.Metadata.Generation)

		// A bad body on edit is shown on the field.
		v.Set("metadata.resourceVersion", p.Metadata.ResourceVersion)
		v.Set("spec.patch", "machine:\n  notAField: 1\n")
		r = b.hx(http.MethodPost, "/ui/tenants/acme/patches/sysctl", v)
		require.Equal(t, http.StatusUnprocessableEntity, r.Code, r.Body)
		require.Contains(t, r.Body, `data-field-error="spec.patch"`)
	})

	t.Run("toggle", func(t *testing.T) {
		r := b.hx(http.MethodPost, "/ui/tenants/acme/patches/sysctl/toggle", url.Values{"enabled": {"true"}})
		require.Equal(t, http.StatusOK, r.Code, r.Body)
		require.Contains(t, r.Body, `data-patch="sysctl"`)
		require.Contains(t, r.Body, ">enabled<")
		s.apiCall(http.MethodGet, "/tenants/acme/configpatches/sysctl", nil, &p)
		require.True(t, *p.Spec.Enabled)
		r = b.hx(http.MethodPost, "/ui/tenants/acme/patches/sysctl/toggle", url.Values{"enabled": {"false"}})
		require.Equal(t, http.StatusOK, r.Code, r.Body)
		require.Contains(t, r.Body, ">disabled<")
	})

	t.Run("delete", func(t *testing.T) {
		r := b.hx(http.MethodDelete, "/ui/tenants/acme/patches/sysctl", nil)
		require.Equal(t, http.StatusOK, r.Code, r.Body)
		require.NotContains(t, r.Body, `data-patch="sysctl"`)
		code, _ := s.apiRaw(http.MethodGet, "/tenants/acme/configpatches/sysctl", nil)
		require.Equal(t, http.StatusNotFound, code)
		r = b.hx(http.MethodDelete, "/ui/tenants/acme/patches/sysctl", nil)
		require.Equal(t, http.StatusNotFound, r.Code)
		require.Equal(t, "#flash", r.Header.Get("HX-Retarget"))
	})

	t.Run("plain form", func(t *testing.T) {
		b.get("/ui/tenants/acme/patches/new") // for the CSRF token
		r := b.form("/ui/tenants/acme/patches", patchValues("plain", "all", "", "strategic", "machine: {}\n", true))
		require.Equal(t, http.StatusSeeOther, r.Code, r.Body)
		require.Equal(t, "/ui/tenants/acme#patches", r.Header.Get("Location"))
		r = b.form("/ui/tenants/acme/patches", patchValues("plain2", "all", "", "strategic", "", true))
		require.Equal(t, http.StatusUnprocessableEntity, r.Code)
		require.Contains(t, r.Body, "<html")
		require.Contains(t, r.Body, `data-field-error="spec.patch"`)
	})
}

func TestPatchActionsNeedWriteRole(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	s.create("/tenants/acme/configpatches", map[string]any{"metadata": map[string]any{"name": "sysctl"},
		"spec": map[string]any{"patch": "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"}})
	b := s.signIn("vi", domain.RoleView)
	for _, tc := range []struct {
		method, path string
		values       url.Values
	}{
		{http.MethodGet, "/ui/tenants/acme/patches/new", nil},
		{http.MethodGet, "/ui/tenants/acme/patches/sysctl/edit", nil},
		{http.MethodGet, "/ui/tenants/acme/patches/sysctl/preview", nil},
		{http.MethodPost, "/ui/tenants/acme/patches", patchValues("x", "all", "", "strategic", "machine: {}\n", true)},
		{http.MethodPost, "/ui/tenants/acme/patches/sysctl", patchValues("", "all", "", "strategic", "machine: {}\n", true)},
		{http.MethodPost, "/ui/tenants/acme/patches/sysctl/toggle", url.Values{"enabled": {"false"}}},
		{http.MethodDelete, "/ui/tenants/acme/patches/sysctl", nil},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := b.hx(tc.method, tc.path, tc.values)
			require.Equal(t, http.StatusForbidden, r.Code, r.Body)
			require.Contains(t, r.Body, `data-testid="flash-error"`)
		})
	}
	var p domain.ConfigPatch
	s.apiCall(http.MethodGet, "/tenants/acme/configpatches/sysctl", nil, &p)
	require.True(t, *p.Spec.Enabled)
	require.Equal(t, int64(1), p.Metadata.Generation)
}

func TestPatchPreviewShowsDiffPerNodeGroup(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	// The PKI follows the tenant's creation; configs need its bundle.
	acmePKIReady(t, s)
	s.create("/tenants/acme/configpatches", map[string]any{"metadata": map[string]any{"name": "sysctl"},
		"spec": map[string]any{"format": "json6902", "enabled": false, "target": map[string]any{"kind": "role", "name": "worker"},
			"patch": `[{"op":"add","path":"/machine/sysctls","value":{"vm.max_map_count":"262144"}}]`}})
	b := s.signIn("ed", domain.RoleEdit)
	r := b.hxGet("/ui/tenants/acme/patches/sysctl/preview")
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="patch-preview"`)
	workers := r.Body[strings.Index(r.Body, `data-preview-group="workers"`):]
	cp := r.Body[strings.Index(r.Body, `data-preview-group="cp"`):strings.Index(r.Body, `data-preview-group="workers"`)]
	require.Contains(t, cp, "No change to this config", "the patch targets workers only")
	require.Contains(t, workers, `data-diff="file">+++ with configpatch/sysctl`)
	require.Regexp(t, `data-diff="add">\+ +vm.max_map_count: &#34;262144&#34;`, workers)
	require.Contains(t, workers, "text-emerald-300")

	// A patch that changes something removes lines too.
	s.create("/tenants/acme/configpatches", map[string]any{"metadata": map[string]any{"name": "hostname"},
		"spec": map[string]any{"enabled": false, "patch": "machine:\n  install:\n    disk: /dev/vdb\n"}})
	r = b.hxGet("/ui/tenants/acme/patches/hostname/preview")
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	require.Contains(t, r.Body, `data-diff="del">-`)
	require.Contains(t, r.Body, `data-diff="add">+`)
	require.Contains(t, r.Body, "/dev/vdb")

	r = b.hxGet("/ui/tenants/acme/patches/nope/preview")
	require.Equal(t, http.StatusNotFound, r.Code)
	page := b.get("/ui/tenants/acme/patches/sysctl/preview")
	require.Equal(t, http.StatusOK, page.Code)
	require.Contains(t, page.Body, "<html")
}

// acmePKIReady waits until the tenant acme's PKI bundle exists (configs render).
func acmePKIReady(t *testing.T, s *uiStack) {
	t.Helper()
	require.Eventually(t, func() bool {
		code, _ := s.apiRaw(http.MethodGet, "/tenants/acme/nodegroups/cp/config", nil)
		return code == http.StatusOK
	}, 15*time.Second, 5*time.Millisecond)
}

func TestUdiffLines(t *testing.T) {
	tests := []struct {
		name string
		diff string
		want []udiffLine
	}{
		{"no change", "", nil},
		{"a hunk", "--- current\n+++ with configpatch/x\n@@ -1,2 +1,2 @@\n machine:\n-  a: 1\n+  a: 2\n", []udiffLine{
			{"file", "--- current"}, {"file", "+++ with configpatch/x"}, {"hunk", "@@ -1,2 +1,2 @@"},
			{"", " machine:"}, {"del", "-  a: 1"}, {"add", "+  a: 2"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, udiffLines(tc.diff))
		})
	}
}
