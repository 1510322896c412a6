package webui

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestMetalMachines(t *testing.T) {
	s := newUIStack(t)
	s.create("/providers", map[string]any{"metadata": map[string]any{"name": "rack"}, "spec": map[string]any{"type": "metal"}})
	s.create("/tenants", map[string]any{"metadata": map[string]any{"name": "iron"}, "spec": map[string]any{}})
	s.create("/tenants/iron/nodegroups", map[string]any{"metadata": map[string]any{"name": "workers"},
		"spec": map[string]any{"role": "worker", "count": 0, "provider": "rack", "providerConfig": map[string]any{"selector": "rack=r1", "installDisk": "/dev/nvme0n1"}}})
	edit, view := s.signIn("erin", "edit"), s.signIn("vic", "view")

	require.Contains(t, edit.get("/ui/tenants/iron").Body, `href="/ui/tenants/iron/metal"`)
	p := view.get("/ui/tenants/iron/metal")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.NotContains(t, p.Body, "data-mutating")
	require.Contains(t, p.Body, "No registered machines.")

	p = edit.get("/ui/tenants/iron/metal")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	for _, id := range []string{"metal-name", "metal-address", "metal-nodegroup", "metal-role", "metal-labels", "metal-hostname"} {
		require.Regexp(t, `for="`+id+`"[\s\S]*?id="`+id+`"`, p.Body, id)
	}
	require.Contains(t, p.Body, `<option value="workers">workers (worker, rack)</option>`)

	form := url.Values{"metadata.name": {"node3"}, "spec.address": {"not an address"}, "spec.nodeGroup": {"workers"},
		"spec.role": {"worker"}, "metadata.labels": {"rack=r1"}}
	p = edit.hx(http.MethodPost, "/ui/tenants/iron/metal", form)
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Contains(t, p.Body, `data-field-error="spec.address">&#34;not an address&#34; is neither an IP address nor a DNS name`)
	require.Contains(t, p.Body, `value="not an address"`)

	p = view.hx(http.MethodPost, "/ui/tenants/iron/metal", form)
	require.Equal(t, http.StatusForbidden, p.Code, p.Body)

	form.Set("spec.address", "10.0.0.13")
	form.Set("installDisk", "nvme1n1")
	p = edit.hx(http.MethodPost, "/ui/tenants/iron/metal", form)
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Contains(t, p.Body, `data-field-error="installDisk">&#34;nvme1n1&#34; must be a device path`)
	form.Set("installDisk", "/dev/nvme1n1")
	p = edit.hx(http.MethodPost, "/ui/tenants/iron/metal", form)
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	require.Equal(t, "/ui/tenants/iron/metal?registered=node3#registered", p.Header.Get("HX-Redirect"))
	var m domain.Machine
	s.apiCall(http.MethodGet, "/tenants/iron/machines/node3", nil, &m)
	require.Equal(t, domain.MachineSpec{NodeGroup: "workers", Role: "worker", Address: "10.0.0.13"}, m.Spec)
	require.Equal(t, map[string]string{"rack": "r1"}, m.Metadata.Labels)
	require.Equal(t, "/dev/nvme1n1", m.Metadata.Annotations[domain.AnnotationInstallDisk])

	form.Set("metadata.name", "node4")
	form.Set("spec.address", "10.0.0.14")
	form.Set("metadata.labels", "rack=r2")
	form.Del("installDisk")
	p = edit.form("/ui/tenants/iron/metal", form)
	require.Equal(t, http.StatusSeeOther, p.Code, p.Body)

	p = edit.get("/ui/tenants/iron/metal")
	require.Regexp(t, `data-metal-machine="node3"[\s\S]*?maintenance mode: no config applied yet[\s\S]*?selected by workers \(rack=r1\)`, p.Body)
	require.Regexp(t, `data-metal-machine="node4"[\s\S]*?maintenance mode[\s\S]*?not matched by workers&#39;s selector rack=r1`, p.Body)

	p = edit.hx(http.MethodPost, "/ui/tenants/iron/metal", form)
	require.Equal(t, http.StatusConflict, p.Code, p.Body)
	require.Contains(t, p.Body, `data-testid="form-error"`)
}
