package webui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// acme creates tenant acme with a control-plane group "cp" (1), a worker
// group "workers" (2) and one machine in each.
func (s *uiStack) acme() {
	s.t.Helper()
	s.createProvider("emu")
	s.create("/tenants", map[string]any{"apiVersion": domain.APIVersion, "kind": "Tenant",
		"metadata": map[string]any{"name": "acme", "labels": map[string]any{"env": "dev"}}, "spec": map[string]any{}})
	s.create("/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "cp"},
		"spec": map[string]any{"role": "controlplane", "count": 1, "provider": "emu"}})
	s.create("/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "workers"},
		"spec": map[string]any{"role": "worker", "count": 2, "provider": "emu"}})
	s.create("/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": "cp1"},
		"spec": map[string]any{"nodeGroup": "cp", "role": "controlplane", "address": "10.0.0.10"}})
	s.create("/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": "w1"},
		"spec": map[string]any{"nodeGroup": "workers", "role": "worker", "address": "10.0.0.21"}})
}

// nodeGroup reads a node group through the API as the admin token.
func (s *uiStack) nodeGroup(tenant, name string) domain.NodeGroup {
	s.t.Helper()
	var ng domain.NodeGroup
	s.apiCall(http.MethodGet, "/tenants/"+tenant+"/nodegroups/"+name, nil, &ng)
	return ng
}

func TestTenantPage(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	edit, view := s.signIn("erin", "edit"), s.signIn("vic", "view")

	for _, tc := range []struct {
		name     string
		b        *browser
		mutating bool
	}{{"edit", edit, true}, {"view", view, false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.b.get("/ui/tenants/acme")
			require.Equal(t, http.StatusOK, p.Code, p.Body)
			for _, want := range []string{`data-testid="tenant-phase"`, `data-nodegroup="cp"`, `data-nodegroup="workers"`,
				`data-machine="cp1"`, `data-machine="w1"`, `id="machines"`, `sse-connect="/ui/live/tenants/acme?seen=overview%3A`,
				`sse-swap="overview"`, `sse-swap="nodegroups"`, `sse-swap="machines"`, `sse-swap="events"`,
				`id="patches"`, `id="applies"`, `id="upgrades"`, `id="health"`, `id="events"`, `href="/ui/tenants/acme/machines/cp1"`,
				`hx-get="/ui/tenants/acme/health"`, "env=dev", domain.DefaultTalosVersion, "10.0.0.21", "TenantCreated"} {
				require.Contains(t, p.Body, want)
			}
			require.Regexp(t, `data-nodegroup="workers"[\s\S]*?data-testid="nodegroup-count">2<`, p.Body)
			require.Equal(t, tc.mutating, strings.Contains(p.Body, "data-mutating"))
			for _, w := range []string{`data-testid="scale-up"`, `data-testid="scale-down"`, `data-testid="delete-tenant"`,
				`/ui/tenants/acme/nodegroups/cp/edit`, `id="nodegroup-add"`} {
				require.Equal(t, tc.mutating, strings.Contains(p.Body, w), w)
			}
			// Credentials of one's own role: every role downloads them.
			require.Contains(t, p.Body, `href="/ui/tenants/acme/kubeconfig"`)
			require.Contains(t, p.Body, `href="/ui/tenants/acme/talosconfig"`)
			if tc.mutating {
				require.Contains(t, p.Body, `hx-delete="/ui/tenants/acme?redirect=1"`)
			}
		})
	}

	t.Run("unknown tenant", func(t *testing.T) {
		p := view.get("/ui/tenants/nope")
		require.Equal(t, http.StatusNotFound, p.Code)
		require.Contains(t, p.Body, `data-testid="error-message"`)
		p = view.hxGet("/ui/tenants/nope")
		require.Equal(t, http.StatusNotFound, p.Code)
		require.Equal(t, "#flash", p.Header.Get("HX-Retarget"))
		require.NotContains(t, p.Body, "<html")
	})

	t.Run("htmx fragment", func(t *testing.T) {
		for target, want := range map[string]string{"nodegroup-rows": `data-nodegroup="cp"`, "machine-rows": `data-machine="w1"`,
			"tenant-overview": `data-testid="tenant-phase"`, "event-rows": "TenantCreated"} {
			req, err := http.NewRequest(http.MethodGet, s.srv.URL+"/ui/tenants/acme", nil)
			require.NoError(t, err)
			req.Header.Set("HX-Request", "true")
			req.Header.Set("HX-Target", target)
			p := view.do(req)
			require.Equal(t, http.StatusOK, p.Code, target)
			require.Contains(t, p.Body, want, target)
			require.NotContains(t, p.Body, "<html", target)
		}
	})

	t.Run("signed out", func(t *testing.T) {
		p := s.newBrowser().get("/ui/tenants/acme")
		require.Equal(t, http.StatusSeeOther, p.Code)
		require.Contains(t, p.Header.Get("Location"), "/ui/login")
	})
}

func TestTenantScale(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	edit, view := s.signIn("erin", "edit"), s.signIn("vic", "view")
	view.get("/ui/tenants/acme")
	edit.get("/ui/tenants/acme")

	t.Run("view may not", func(t *testing.T) {
		p := view.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers/scale", url.Values{"delta": {"1"}})
		require.Equal(t, http.StatusForbidden, p.Code, p.Body)
		require.Equal(t, "#flash", p.Header.Get("HX-Retarget"))
		require.Contains(t, p.Body, `data-testid="flash-error"`)
		require.Equal(t, 2, s.nodeGroup("acme", "workers").Spec.Count)
	})

	t.Run("up and down", func(t *testing.T) {
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers/scale", url.Values{"delta": {"1"}})
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.NotContains(t, p.Body, "<html")
		require.Regexp(t, `data-nodegroup="workers"[\s\S]*?data-testid="nodegroup-count">3<`, p.Body)
		require.Equal(t, 3, s.nodeGroup("acme", "workers").Spec.Count)

		p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers/scale", url.Values{"delta": {"-1"}})
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Equal(t, 2, s.nodeGroup("acme", "workers").Spec.Count)

		// The scaling shows in the event history.
		p = edit.get("/ui/tenants/acme")
		require.Contains(t, p.Body, "NodeGroupScaled")
	})

	t.Run("without htmx", func(t *testing.T) {
		p := edit.form("/ui/tenants/acme/nodegroups/workers/scale", url.Values{"delta": {"1"}})
		require.Equal(t, http.StatusSeeOther, p.Code, p.Body)
		require.Equal(t, "/ui/tenants/acme#nodegroups", p.Header.Get("Location"))
		require.Equal(t, 3, s.nodeGroup("acme", "workers").Spec.Count)
	})

	t.Run("even control plane refused", func(t *testing.T) {
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/cp/scale", url.Values{"delta": {"1"}})
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.Equal(t, "#flash", p.Header.Get("HX-Retarget"))
		require.Contains(t, p.Body, "spec.count")
		require.Contains(t, p.Body, "odd count")
		require.Equal(t, 1, s.nodeGroup("acme", "cp").Spec.Count)
	})

	t.Run("below zero refused", func(t *testing.T) {
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers/scale", url.Values{"delta": {"-4"}})
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.Contains(t, p.Body, "spec.count")
	})

	t.Run("bad delta", func(t *testing.T) {
		for _, d := range []string{"", "0", "x"} {
			p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers/scale", url.Values{"delta": {d}})
			require.Equal(t, http.StatusBadRequest, p.Code, d)
		}
	})

	t.Run("unknown group", func(t *testing.T) {
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/nope/scale", url.Values{"delta": {"1"}})
		require.Equal(t, http.StatusNotFound, p.Code, p.Body)
	})

	t.Run("csrf", func(t *testing.T) {
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers/scale", nil)
		require.Equal(t, http.StatusBadRequest, p.Code) // token present, delta missing
		req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/ui/tenants/acme/nodegroups/workers/scale", strings.NewReader("delta=1"))
		require.NoError(t, err)
		req.Header.Set("HX-Request", "true")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		p = edit.do(req)
		require.Equal(t, http.StatusForbidden, p.Code)
	})
}

func TestNodeGroupEdit(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	edit, view := s.signIn("erin", "edit"), s.signIn("vic", "view")

	p := view.get("/ui/tenants/acme/nodegroups/workers/edit")
	require.Equal(t, http.StatusForbidden, p.Code)
	require.NotContains(t, p.Body, "data-mutating")
	require.Equal(t, http.StatusNotFound, edit.get("/ui/tenants/acme/nodegroups/nope/edit").Code)

	p = edit.get("/ui/tenants/acme/nodegroups/workers/edit")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	rv := s.nodeGroup("acme", "workers").Metadata.ResourceVersion
	require.Contains(t, p.Body, `name="metadata.resourceVersion" value="`+rv+`"`)
	require.Contains(t, p.Body, `name="spec.count" type="number" min="0" value="2"`)
	require.Regexp(t, `id="nodegroup-edit"[^>]*method="post"[\s\S]*?name="_csrf"`, p.Body) // works without htmx too

	valid := func() url.Values {
		return url.Values{"metadata.resourceVersion": {rv}, "spec.count": {"4"}, "spec.talosVersion": {"v1.12.1"},
			"spec.labels": {"tier=web, zone=a"}, "spec.updateStrategy.maxParallelism": {"2"}, "spec.providerConfig": {`{"installDisk": "/dev/vdb"}`}}
	}

	t.Run("impact before the save", func(t *testing.T) {
		v := valid()
		v.Set("spec.labels", "tier=api")
		v.Set("spec.talosVersion", "")
		v.Set("spec.count", "2")
		v.Set("preview", "impact")
		var p page
		require.Eventually(t, func() bool { // the tenant's PKI comes a moment after it
			p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", v)
			return !strings.Contains(p.Body, "impact-unknown")
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Contains(t, p.Body, `data-testid="impact-summary">0 rebooted (drained first), 1 reconfigured in place, 0 created, 0 destroyed, 1 unchanged<`)
		require.Contains(t, p.Body, `data-impact-machine="w1" data-impact-action="reconfigure"`)
		require.Contains(t, p.Body, "config changes, no reboot")
		require.Contains(t, p.Body, `name="spec.labels" value="tier=api"`, "the form keeps the edit for the Save")
		require.Empty(t, s.nodeGroup("acme", "workers").Spec.Labels, "nothing saved")
		require.Equal(t, rv, s.nodeGroup("acme", "workers").Metadata.ResourceVersion)
	})

	t.Run("api refusal next to the field", func(t *testing.T) {
		v := valid()
		v.Set("spec.count", "-1")
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", v)
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.NotContains(t, p.Body, "<html")
		require.Contains(t, p.Body, `data-testid="form-error"`)
		require.Regexp(t, `name="spec.count"[^>]*value="-1"[\s\S]*?data-field-error="spec.count">must be between 0 and`, p.Body)
		require.Equal(t, 2, s.nodeGroup("acme", "workers").Spec.Count)
	})

	t.Run("form checks", func(t *testing.T) {
		v := valid()
		v.Set("spec.count", "many")
		v.Set("spec.providerConfig", "{not json")
		v.Set("spec.labels", "novalue")
		p := edit.form("/ui/tenants/acme/nodegroups/workers", v)
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.Contains(t, p.Body, "<html") // a plain form gets the whole page back
		for _, f := range []string{"spec.count", "spec.providerConfig", "spec.labels"} {
			require.Contains(t, p.Body, `data-field-error="`+f+`"`, f)
		}
	})

	t.Run("talos version refused", func(t *testing.T) {
		v := valid()
		v.Set("spec.talosVersion", "latest")
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", v)
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.Contains(t, p.Body, `data-field-error="spec.talosVersion"`)
	})

	t.Run("a schematic beside an installImage is refused at the schematic", func(t *testing.T) {
		v := valid()
		v.Set("spec.providerConfig", `{"installImage": "ghcr.io/acme/installer:v1.12.1"}`)
		v.Set("spec.schematic.extensions", "siderolabs/iscsi-tools")
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", v)
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.Regexp(t, `id="nodegroup-edit-kernel-args"[\s\S]*?data-field-error="spec.schematic">[^<]*installImage`, p.Body,
			"the cause on spec.schematic itself is shown with the schematic's fields")
		require.Nil(t, s.nodeGroup("acme", "workers").Spec.Schematic)
	})

	t.Run("view may not", func(t *testing.T) {
		view.get("/ui/tenants/acme")
		p := view.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", valid())
		require.Equal(t, http.StatusForbidden, p.Code, p.Body)
	})

	t.Run("saved", func(t *testing.T) {
		p := edit.form("/ui/tenants/acme/nodegroups/workers", valid())
		require.Equal(t, http.StatusSeeOther, p.Code, p.Body)
		require.Equal(t, "/ui/tenants/acme#nodegroups", p.Header.Get("Location"))
		ng := s.nodeGroup("acme", "workers")
		require.Equal(t, 4, ng.Spec.Count)
		require.Equal(t, "v1.12.1", ng.Spec.TalosVersion)
		require.Equal(t, map[string]string{"tier": "web", "zone": "a"}, ng.Spec.Labels)
		require.Equal(t, 2, ng.Spec.UpdateStrategy.MaxParallelism)
		var pc map[string]any
		require.NoError(t, json.Unmarshal(ng.Spec.ProviderConfig, &pc))
		require.Equal(t, "/dev/vdb", pc["installDisk"])
		require.Equal(t, "emu", ng.Spec.Provider)

		page := edit.get("/ui/tenants/acme")
		require.Contains(t, page.Body, `data-testid="nodegroup-talos-override">v1.12.1<`)
	})

	t.Run("stale form is a conflict", func(t *testing.T) {
		// rv is the version before "saved".
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", valid())
		require.Equal(t, http.StatusConflict, p.Code, p.Body)
		require.Contains(t, p.Body, `data-testid="form-error"`)
		require.Contains(t, p.Body, "reload")
	})

	t.Run("htmx save redirects", func(t *testing.T) {
		v := valid()
		v.Set("metadata.resourceVersion", s.nodeGroup("acme", "workers").Metadata.ResourceVersion)
		v.Set("spec.count", "5")
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", v)
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Equal(t, "/ui/tenants/acme#nodegroups", p.Header.Get("HX-Redirect"))
		require.Equal(t, 5, s.nodeGroup("acme", "workers").Spec.Count)
	})
}

func TestNodeGroupAdd(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	edit, view := s.signIn("erin", "edit"), s.signIn("vic", "view")
	view.get("/ui/tenants/acme")
	edit.get("/ui/tenants/acme")

	p := view.hx(http.MethodPost, "/ui/tenants/acme/nodegroups", url.Values{"metadata.name": {"more"}, "spec.role": {"worker"},
		"spec.count": {"1"}, "spec.provider": {"emu"}})
	require.Equal(t, http.StatusForbidden, p.Code, p.Body)

	p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups", url.Values{"metadata.name": {"cp2"}, "spec.role": {"controlplane"},
		"spec.count": {"2"}, "spec.provider": {"emu"}})
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.NotContains(t, p.Body, "<html")
	require.Contains(t, p.Body, `data-field-error="spec.count"`)
	require.Contains(t, p.Body, `value="cp2"`) // the values are kept

	p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups", url.Values{"metadata.name": {"Bad Name"}, "spec.role": {"worker"},
		"spec.count": {"x"}, "spec.provider": {"emu"}})
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Contains(t, p.Body, `data-field-error="spec.count"`)

	p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups", url.Values{"metadata.name": {"more"}, "spec.role": {"worker"},
		"spec.count": {"3"}, "spec.provider": {"emu"}})
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	require.Contains(t, p.Body, "Node group more created.")
	require.Equal(t, 3, s.nodeGroup("acme", "more").Spec.Count)

	p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups", url.Values{"metadata.name": {"more"}, "spec.role": {"worker"},
		"spec.count": {"3"}, "spec.provider": {"emu"}})
	require.Equal(t, http.StatusConflict, p.Code, p.Body)
	require.Contains(t, p.Body, `data-testid="form-error"`)
}

func TestTenantHealthProbe(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	view := s.signIn("vic", "view")

	p := view.hxGet("/ui/tenants/acme/health")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.NotContains(t, p.Body, "<html")
	require.Contains(t, p.Body, `data-testid="health-unavailable"`)
	require.Contains(t, p.Body, "not enabled")

	p = view.get("/ui/tenants/acme/health")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Contains(t, p.Body, "<html")
	require.Contains(t, p.Body, `data-testid="health-unavailable"`)
}

func TestTenantHealthView(t *testing.T) {
	h := &domain.TenantHealth{Tenant: "acme", State: domain.HealthDegraded, Reasons: []string{"w1 is not ready"},
		ObservedAt: time.Now(), Duration: "12ms", Etcd: domain.EtcdHealth{Healthy: 1, Quorum: true},
		Kubernetes: &domain.KubernetesHealth{Ready: true, Version: "v1.35.4"},
		Machines: []domain.MachineHealth{{Name: "cp1", Role: "controlplane", Reachable: true, Ready: true, Etcd: domain.EtcdMemberHealthy, Node: domain.NodeReady},
			{Name: "w1", Role: "worker", Error: "connection refused", Node: domain.NodeNotReady}}}
	var b strings.Builder
	require.NoError(t, healthResult(healthView{Health: h}).Render(t.Context(), &b))
	for _, want := range []string{`data-testid="health-state"`, "Degraded", "w1 is not ready", `data-health-machine="cp1"`, "connection refused", "quorum",
		"Kubernetes v1.35.4 ready", `data-testid="health-node">NotReady<`, `data-testid="health-node">Ready<`} {
		require.Contains(t, b.String(), want)
	}
	require.NotContains(t, b.String(), "no quorum")

	h.Kubernetes = &domain.KubernetesHealth{Error: "connection refused"}
	b.Reset()
	require.NoError(t, healthResult(healthView{Health: h}).Render(t.Context(), &b))
	require.Contains(t, b.String(), "Kubernetes API server: connection refused")
}

// TestTenantDownloads: every role downloads the credentials of its own role
// (the kubeconfig with its exec plugin, the talosconfig); the break-glass
// kubeconfig is offered to, and served for, global admins only.
func TestTenantDownloads(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	admin, edit, view := s.signIn("ada", "admin"), s.signIn("erin", "edit"), s.signIn("vic", "view")

	for _, what := range []string{"kubeconfig", "talosconfig"} {
		t.Run(what, func(t *testing.T) {
			for _, who := range []*browser{edit, view} {
				var p page
				// The PKI is generated after the tenant is created.
				require.Eventually(t, func() bool {
					p = who.get("/ui/tenants/acme/" + what)
					return p.Code == http.StatusOK
				}, 10*time.Second, 5*time.Millisecond)
				require.Equal(t, `attachment; filename="acme.`+what+`"`, p.Header.Get("Content-Disposition"))
				require.Contains(t, p.Body, "acme")
				require.NotContains(t, p.Body, "client-key-data", "no long-lived key")
			}
			require.Equal(t, http.StatusNotFound, edit.get("/ui/tenants/nope/"+what).Code)
		})
	}
	t.Run("break-glass", func(t *testing.T) {
		require.Contains(t, admin.get("/ui/tenants/acme").Body, `data-testid="download-kubeconfig-breakglass"`)
		require.NotContains(t, edit.get("/ui/tenants/acme").Body, `data-testid="download-kubeconfig-breakglass"`)
		p := admin.get("/ui/tenants/acme/kubeconfig-breakglass")
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Equal(t, `attachment; filename="acme.admin.kubeconfig"`, p.Header.Get("Content-Disposition"))
		require.Contains(t, p.Body, "client-key-data")
		p = edit.get("/ui/tenants/acme/kubeconfig-breakglass")
		require.Equal(t, http.StatusForbidden, p.Code)
		require.Empty(t, p.Header.Get("Content-Disposition"))
	})
}

func TestTenantLive(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	view := s.signIn("vic", "view")

	seen := map[string]bool{}
	changed := false
	ok := view.liveEvents("/ui/live/tenants/acme", 15*time.Second, func(event, data string) bool {
		seen[event] = true
		if strings.Contains(data, `data-testid="flash-error"`) {
			t.Errorf("live fragment %s failed: %s", event, data)
			return true
		}
		if !changed && seen["overview"] && seen["nodegroups"] && seen["machines"] && seen["events"] {
			// Every part came on connect; now change two of them.
			changed = true
			s.create("/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": "w9"},
				"spec": map[string]any{"nodeGroup": "workers", "role": "worker", "address": "10.0.0.29"}})
			s.apiCall(http.MethodPatch, "/tenants/acme/nodegroups/workers", map[string]any{"spec": map[string]any{"count": 7}}, nil)
			return false
		}
		if changed && event == "machines" && strings.Contains(data, `data-machine="w9"`) {
			seen["machines-changed"] = true
		}
		if changed && event == "nodegroups" && strings.Contains(data, `data-testid="nodegroup-count">7<`) {
			seen["nodegroups-changed"] = true
		}
		return seen["machines-changed"] && seen["nodegroups-changed"]
	})
	require.True(t, ok, "seen: %v", seen)
}

func TestTenantLiveAfterDeletion(t *testing.T) {
	s := newUIStack(t)
	s.create("/tenants", map[string]any{"apiVersion": domain.APIVersion, "kind": "Tenant",
		"metadata": map[string]any{"name": "brief"}, "spec": map[string]any{}})
	edit := s.signIn("erin", "edit")
	edit.get("/ui/tenants/brief")

	deleted := false
	ok := edit.liveEvents("/ui/live/tenants/brief", 15*time.Second, func(event, data string) bool {
		if strings.Contains(data, `data-testid="flash-error"`) {
			t.Errorf("live fragment %s failed: %s", event, data)
			return true
		}
		if !deleted && event == "overview" {
			deleted = true
			p := edit.hx(http.MethodDelete, "/ui/tenants/brief?redirect=1", nil)
			require.Equal(t, http.StatusAccepted, p.Code, p.Body)
			require.Equal(t, "/ui/tenants", p.Header.Get("HX-Redirect"))
			return false
		}
		return deleted && event == "machines" && strings.Contains(data, `data-testid="tenant-gone"`)
	})
	require.True(t, ok)
	require.Equal(t, http.StatusNotFound, edit.get("/ui/tenants/brief").Code)
}

func TestTenantOverviewView(t *testing.T) {
	now := time.Now()
	tn := domain.Tenant{Metadata: domain.ObjectMeta{Name: "acme", DeletionTimestamp: &now},
		Spec: domain.TenantSpec{TalosVersion: "v1.13.0", ControlPlane: domain.ControlPlaneSpec{Endpoint: "https://10.0.0.10:6443"}},
		Status: domain.TenantStatus{Phase: "Ready", Conditions: []domain.Condition{{Type: "Ready", Status: "False",
			Reason: "MachinesNotReady", Message: "1 of 2 machines ready", LastTransitionTime: now.Add(-3 * time.Minute)}}}}
	var b strings.Builder
	require.NoError(t, tenantOverview(tn, now).Render(t.Context(), &b))
	for _, want := range []string{`data-testid="tenant-deleting"`, `data-phase="Deleting"`, "https://10.0.0.10:6443",
		`data-condition="Ready"`, "MachinesNotReady", "1 of 2 machines ready", ">3m<"} {
		require.Contains(t, b.String(), want)
	}
}

func TestTenantOverviewShowsDrift(t *testing.T) {
	now := time.Now()
	tn := domain.Tenant{Metadata: domain.ObjectMeta{Name: "acme"}, Spec: domain.TenantSpec{TalosVersion: "v1.13.0"}}
	var b strings.Builder
	require.NoError(t, tenantOverview(tn, now).Render(t.Context(), &b))
	require.NotContains(t, b.String(), `data-testid="tenant-drift"`, "no check, no drift section")

	d := &domain.DriftStatus{CheckedAt: &now, Add: 1, Resources: []domain.DriftResource{{Address: `emulated_machine.ng_workers["workers-0"]`, Action: "create"}},
		Machines: []domain.MachineDrift{{Name: "cp-0", Reason: "the node runs a config other than the one RezusCloud applied"}}}
	d.Summary = domain.DriftSummary(d.Add, d.Change, d.Destroy, d.Machines)
	tn.Status.Drift = d
	tn.Status.Conditions = []domain.Condition{domain.DriftCondition(d)}
	b.Reset()
	require.NoError(t, tenantOverview(tn, now).Render(t.Context(), &b))
	for _, want := range []string{`data-condition="Drifted"`, `data-testid="tenant-drift"`, "1 to add, 0 to change, 0 to destroy; cp-0 config differs",
		"emulated_machine.ng_workers[&#34;workers-0&#34;]", ">create<", "machine cp-0"} {
		require.Contains(t, b.String(), want)
	}
}
