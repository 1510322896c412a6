package webui

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (s *uiStack) tenant(name string) domain.Tenant {
	s.t.Helper()
	var t domain.Tenant
	s.apiCall(http.MethodGet, "/tenants/"+name, nil, &t)
	return t
}

func TestTenantSpecEdit(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	edit, view := s.signIn("erin", "edit"), s.signIn("vic", "view")

	require.NotContains(t, view.get("/ui/tenants/acme").Body, `data-testid="edit-tenant"`)
	require.Contains(t, edit.get("/ui/tenants/acme").Body, `href="/ui/tenants/acme/edit"`)
	p := view.get("/ui/tenants/acme/edit")
	require.Equal(t, http.StatusForbidden, p.Code)
	require.NotContains(t, p.Body, "data-mutating")
	require.Equal(t, http.StatusNotFound, edit.get("/ui/tenants/nope/edit").Code)

	p = edit.get("/ui/tenants/acme/edit")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	rv := s.tenant("acme").Metadata.ResourceVersion
	require.Contains(t, p.Body, `name="metadata.resourceVersion" value="`+rv+`"`)
	require.Contains(t, p.Body, `name="spec.talosVersion" value="`+domain.DefaultTalosVersion+`"`)
	require.Contains(t, p.Body, `name="spec.network.podSubnets" value="`+domain.DefaultPodSubnet+`"`)
	require.Contains(t, p.Body, `name="metadata.labels" value="env=dev"`)
	require.Contains(t, p.Body, `data-testid="tenant-spec-upgrade-note"`)
	require.Regexp(t, `id="tenant-spec"[^>]*method="post"[\s\S]*?name="_csrf"`, p.Body) // works without htmx
	// Every input is labelled by a label for= its id.
	require.Regexp(t, `for="tenant-spec-talos"[\s\S]*?id="tenant-spec-talos"`, p.Body)

	valid := func() url.Values {
		return url.Values{"metadata.resourceVersion": {rv}, "spec.talosVersion": {domain.DefaultTalosVersion},
			"spec.kubernetesVersion": {domain.DefaultKubernetesVersion}, "spec.controlPlane.endpoint": {"https://10.0.0.5:6443"},
			"spec.network.podSubnets": {"10.244.0.0/16, fd00:10:244::/56"}, "spec.network.serviceSubnets": {"10.96.0.0/12"},
			"spec.network.dnsDomain": {"cluster.local"}, "metadata.labels": {"env=prod, team=a"}}
	}

	t.Run("api causes next to their fields", func(t *testing.T) {
		v := valid()
		v.Set("spec.controlPlane.endpoint", "http://x/path")
		v.Set("spec.network.serviceSubnets", "10.244.0.0/20")
		v.Set("spec.kubernetesVersion", "latest")
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/spec", v)
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.NotContains(t, p.Body, "<html")
		require.Contains(t, p.Body, `data-field-error="spec.controlPlane.endpoint">&#34;http://x/path&#34; must be an https URL`)
		require.Contains(t, p.Body, `data-field-error="spec.network.serviceSubnets">10.244.0.0/20 overlaps pod subnet`)
		require.Contains(t, p.Body, `data-field-error="spec.kubernetesVersion"`)
		require.Contains(t, p.Body, `value="http://x/path"`) // what was typed is kept
		require.Empty(t, s.tenant("acme").Spec.ControlPlane.Endpoint)
	})

	t.Run("impact before the save", func(t *testing.T) {
		// A new endpoint reaches every machine's config (cluster.controlPlane.endpoint).
		v := valid()
		v.Set("preview", "impact")
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/spec", v)
		require.Eventually(t, func() bool { // the tenant's PKI comes a moment after it
			p = edit.hx(http.MethodPost, "/ui/tenants/acme/spec", v)
			return !strings.Contains(p.Body, "impact-unknown")
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Contains(t, p.Body, `data-testid="impact-summary">0 rebooted (drained first), 2 reconfigured in place`)
		require.Contains(t, p.Body, `data-impact-machine="cp1" data-impact-action="reconfigure"`)
		require.Contains(t, p.Body, `value="https://10.0.0.5:6443"`, "the form keeps the edit for the Save")
		require.Empty(t, s.tenant("acme").Spec.ControlPlane.Endpoint, "nothing saved")
	})

	t.Run("bad labels", func(t *testing.T) {
		v := valid()
		v.Set("metadata.labels", "novalue")
		p := edit.form("/ui/tenants/acme/spec", v)
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.Contains(t, p.Body, "<html")
		require.Contains(t, p.Body, `data-field-error="metadata.labels"`)
	})

	t.Run("view may not", func(t *testing.T) {
		view.get("/ui/tenants/acme")
		p := view.hx(http.MethodPost, "/ui/tenants/acme/spec", valid())
		require.Equal(t, http.StatusForbidden, p.Code, p.Body)
	})

	t.Run("saved", func(t *testing.T) {
		p := edit.form("/ui/tenants/acme/spec", valid())
		require.Equal(t, http.StatusSeeOther, p.Code, p.Body)
		require.Equal(t, "/ui/tenants/acme#tenant-overview", p.Header.Get("Location"))
		tn := s.tenant("acme")
		require.Equal(t, "https://10.0.0.5:6443", tn.Spec.ControlPlane.Endpoint)
		require.Equal(t, []string{"10.244.0.0/16", "fd00:10:244::/56"}, tn.Spec.Network.PodSubnets)
		require.Equal(t, map[string]string{"env": "prod", "team": "a"}, tn.Metadata.Labels)
		require.NotNil(t, tn.Spec.EtcdBackup, "the backup schedule is kept")
	})

	t.Run("stale form is a conflict", func(t *testing.T) {
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/spec", valid())
		require.Equal(t, http.StatusConflict, p.Code, p.Body)
		require.Contains(t, p.Body, "reload")
	})

	t.Run("a version change lands on the upgrades", func(t *testing.T) {
		v := valid()
		v.Set("metadata.resourceVersion", s.tenant("acme").Metadata.ResourceVersion)
		v.Set("spec.talosVersion", "v1.13.1")
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/spec", v)
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Equal(t, "/ui/tenants/acme#upgrades", p.Header.Get("HX-Redirect"))
		require.Equal(t, "v1.13.1", s.tenant("acme").Spec.TalosVersion)
	})

	t.Run("extensions make the tenant's schematic", func(t *testing.T) {
		current := func() url.Values {
			tn := s.tenant("acme")
			v := valid()
			v.Set("metadata.resourceVersion", tn.Metadata.ResourceVersion)
			v.Set("spec.talosVersion", tn.Spec.TalosVersion)
			return v
		}
		v := current()
		v.Set("spec.schematic.extensions", "iscsi-tools\nsiderolabs/gvisor, siderolabs/gvisor")
		v.Set("spec.schematic.extraKernelArgs", "console=ttyS0")
		p := edit.hx(http.MethodPost, "/ui/tenants/acme/spec", v)
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.Regexp(t, `data-field-error="spec.schematic.extensions">[^<]*siderolabs/iscsi-tools`, p.Body, "the cause names the right form")
		require.Contains(t, p.Body, "iscsi-tools\nsiderolabs/gvisor, siderolabs/gvisor</textarea>", "what was typed is kept")
		require.Nil(t, s.tenant("acme").Spec.Schematic)

		v.Set("spec.schematic.extensions", "siderolabs/util-linux-tools\nsiderolabs/iscsi-tools")
		v.Set("preview", "impact")
		p = edit.hx(http.MethodPost, "/ui/tenants/acme/spec", v)
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Contains(t, p.Body, `data-impact-machine="cp1" data-impact-action="reimage"`, "the groups that follow the tenant are re-imaged")
		require.Nil(t, s.tenant("acme").Spec.Schematic, "nothing saved")

		v.Del("preview")
		p = edit.hx(http.MethodPost, "/ui/tenants/acme/spec", v)
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Equal(t, "/ui/tenants/acme#upgrades", p.Header.Get("HX-Redirect"), "a re-image is an upgrade run")
		want := &domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}, ExtraKernelArgs: []string{"console=ttyS0"}}
		require.Equal(t, want, s.tenant("acme").Spec.Schematic)
		p = edit.get("/ui/tenants/acme/edit")
		require.Contains(t, p.Body, ">siderolabs/iscsi-tools\nsiderolabs/util-linux-tools</textarea>")
		require.Contains(t, p.Body, `name="spec.schematic.extraKernelArgs" value="console=ttyS0"`)

		// Emptying both fields: the groups are back on the vanilla image.
		v = current()
		p = edit.form("/ui/tenants/acme/spec", v)
		require.Equal(t, http.StatusSeeOther, p.Code, p.Body)
		require.Equal(t, "/ui/tenants/acme#upgrades", p.Header.Get("Location"))
		require.Nil(t, s.tenant("acme").Spec.Schematic)
	})
}
