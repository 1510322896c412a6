//go:build browser

package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// formsSession starts a server (no emulator: these forms only write
// objects through the API) and signs the admin in, in a fresh tab.
func formsSession(t *testing.T) (*proc, *tab) {
	t.Helper()
	chromium := findChromium(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir)
	adminPassword := strings.TrimSpace(string(waitFile(t, filepath.Join(dataDir, "initial-admin-password"))))
	browserCtx := startBrowser(t, chromium)
	admin := newBrowserUser(t, browserCtx, p.url, "admin", "")
	t.Cleanup(admin.close)
	b := admin.on(t)
	b.open("/ui/login", "form[action='/ui/login']")
	b.signIn("admin", adminPassword)
	return p, b
}

// mustAPI calls the API as the admin token and fails the test on an error answer.
func mustAPI(t *testing.T, p *proc, method, path, body string) map[string]any {
	t.Helper()
	code, out := p.do(method, path, body)
	require.Less(t, code, 400, "%s %s: %v", method, path, out)
	return out
}

// expectFocusRing tabs to sel with the keyboard and checks that focusing it
// shows a ring (the inputs' focus style), so focus is visible.
func (b *tab) expectFocusRing(sel string) {
	b.t.Helper()
	b.waitJS(sel+" shows a focus ring when focused", 10*time.Second, `(() => {
	  const e = document.querySelector(`+jsString(sel)+`);
	  if (!e) return {ok: false, state: 'missing'};
	  e.focus();
	  const s = getComputedStyle(e);
	  const ring = s.boxShadow !== 'none' || (s.outlineStyle !== 'none' && s.outlineWidth !== '0px');
	  const label = e.labels && e.labels.length > 0 ? e.labels[0].textContent.trim() : (e.getAttribute('aria-label') || '');
	  return {ok: document.activeElement === e && ring && label !== '', state: 'ring=' + ring + ' label=' + label}; })()`)
}

// TestBrowserTenantSpecEdit edits a tenant's spec from its page: a refused
// endpoint shows its cause at the field, a fixed form with a new Talos
// version saves and lands on the upgrades, and the overview shows the new
// values.
func TestBrowserTenantSpecEdit(t *testing.T) {
	p, b := formsSession(t)
	mustAPI(t, p, http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"acme","labels":{"env":"dev"}},"spec":{}}`)

	b.open("/ui/tenants/acme", `a[data-testid=edit-tenant]`)
	b.clickAndLoad(`a[data-testid=edit-tenant]`)
	b.waitPath("/ui/tenants/acme/edit", 10*time.Second)
	b.waitLoaded()
	b.expectFocusRing("#tenant-spec-endpoint")
	b.setValue("#tenant-spec-endpoint", "http://10.0.0.5:6443/api")
	b.setValue("#tenant-spec-services", "10.244.1.0/24")
	b.click(`[data-testid=save-tenant-spec]`)
	b.waitJS("the API's causes show at their fields", 10*time.Second, `(() => {
	  const ep = document.querySelector('#tenant-spec-endpoint ~ [data-field-error="spec.controlPlane.endpoint"]');
	  const svc = document.querySelector('#tenant-spec-services ~ [data-field-error="spec.network.serviceSubnets"]');
	  return {ok: !!ep && !!svc && ep.textContent.includes('https URL') && svc.textContent.includes('overlaps'),
	          state: (ep ? ep.textContent : 'no endpoint error') + ' | ' + (svc ? svc.textContent : 'no subnet error')}; })()`)

	b.setValue("#tenant-spec-endpoint", "https://10.0.0.5:6443")
	b.setValue("#tenant-spec-services", "10.96.0.0/12")
	b.setValue("#tenant-spec-talos", "v1.13.1")
	b.setValue("#tenant-spec-labels", "env=prod,team=a")
	b.click(`[data-testid=save-tenant-spec]`)
	b.waitPath("/ui/tenants/acme", 10*time.Second)
	b.waitJS("the overview shows the new spec", 10*time.Second, `(() => {
	  const t = document.querySelector('[data-testid=tenant-talos]'), e = document.querySelector('[data-testid=tenant-endpoint]'),
	        l = document.querySelector('[data-testid=tenant-labels]');
	  const s = [t, e, l].map(n => n ? n.textContent.replace(/\s+/g, ' ').trim() : '?').join(' | ');
	  return {ok: location.hash === '#upgrades' && s === 'v1.13.1 | https://10.0.0.5:6443 | env=prod team=a', state: location.hash + ' ' + s}; })()`)
	got := mustAPI(t, p, http.MethodGet, "/api/v1/tenants/acme", "")
	require.Equal(t, "v1.13.1", got["spec"].(map[string]any)["talosVersion"])
}

// TestBrowserNodeGroupTaintsAndDelete edits a node group's taints and node
// labels (a refused effect shows at the field), then deletes another group
// through its confirmation: the row goes without a reload.
func TestBrowserNodeGroupTaintsAndDelete(t *testing.T) {
	p, b := formsSession(t)
	mustAPI(t, p, http.MethodPost, "/api/v1/providers", `{"metadata":{"name":"emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:1"}}}`)
	mustAPI(t, p, http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"acme"},"spec":{}}`)
	mustAPI(t, p, http.MethodPost, "/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emu"}}`)
	mustAPI(t, p, http.MethodPost, "/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"gpus"},"spec":{"role":"worker","count":2,"provider":"emu"}}`)

	b.open("/ui/tenants/acme/nodegroups/workers/edit", "#nodegroup-taints")
	b.expectFocusRing("#nodegroup-taints")
	b.setValue("#nodegroup-taints", "dedicated=gpu:Sometimes")
	b.setValue("input[name='spec.labels']", "tier=gpu")
	b.click("[data-testid=save-nodegroup]")
	b.waitJS("the refused effect shows at the taints", 10*time.Second, `(() => {
	  const e = document.querySelector('#nodegroup-taints ~ [data-field-error="spec.taints"]');
	  return {ok: !!e && e.textContent.includes('NoSchedule'), state: e ? e.textContent : 'no error'}; })()`)
	b.setValue("#nodegroup-taints", "dedicated=gpu:NoSchedule")
	// Show impact: the same write as a dry run, answered in the form; nothing saved.
	b.click("[data-testid=impact-nodegroup]")
	// The dry run is tofu init and plan: 1.8 s alone, over 10 s beside the
	// e2e lane in CI. The bound is liveness, not speed.
	b.waitJS("the impact shows before the save", time.Minute, `(() => {
	  const s = document.querySelector('[data-testid=impact-summary], [data-testid=impact-unknown]');
	  const kept = document.querySelector('#nodegroup-taints');
	  return {ok: !!s && s.textContent.includes('unchanged') && kept && kept.value === 'dedicated=gpu:NoSchedule',
	          state: s ? s.textContent : 'no impact panel'}; })()`)
	require.NotContains(t, mustAPI(t, p, http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", "")["spec"], "taints", "a dry run saves nothing")
	b.click("[data-testid=save-nodegroup]")
	b.waitPath("/ui/tenants/acme", 10*time.Second)
	ng := mustAPI(t, p, http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", "")
	spec := ng["spec"].(map[string]any)
	require.Equal(t, []any{map[string]any{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}}, spec["taints"])
	require.Equal(t, map[string]any{"tier": "gpu"}, spec["labels"])

	// System extensions and kernel arguments: a refused name shows at the
	// field; the saved ones are the group's schematic.
	b.open("/ui/tenants/acme/nodegroups/workers/edit", "#nodegroup-edit-extensions")
	b.setValue("#nodegroup-edit-extensions", "iscsi-tools")
	b.click("[data-testid=save-nodegroup]")
	b.waitJS("the refused extension shows at its field", 10*time.Second, `(() => {
	  const e = document.querySelector('#nodegroup-edit-extensions ~ [data-field-error="spec.schematic.extensions"]');
	  return {ok: !!e && e.textContent.includes('siderolabs/iscsi-tools'), state: e ? e.textContent : 'no error'}; })()`)
	b.setValue("#nodegroup-edit-extensions", "siderolabs/util-linux-tools\nsiderolabs/iscsi-tools")
	b.setValue("#nodegroup-edit-kernel-args", "console=ttyS0 net.ifnames=0")
	b.click("[data-testid=save-nodegroup]")
	b.waitPath("/ui/tenants/acme", 10*time.Second)
	spec = mustAPI(t, p, http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", "")["spec"].(map[string]any)
	require.Equal(t, map[string]any{"extensions": []any{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"},
		"extraKernelArgs": []any{"console=ttyS0", "net.ifnames=0"}}, spec["schematic"], "sorted extensions, kernel arguments in order")

	b.open("/ui/tenants/acme", `tr[data-nodegroup=gpus] [data-testid=delete-nodegroup]`)
	b.markNoReload()
	b.click(`tr[data-nodegroup=gpus] [data-testid=delete-nodegroup]`)
	b.waitJS("the deleted group's row is gone", 15*time.Second, `(() => {
	  const rows = [...document.querySelectorAll('#nodegroup-rows tr[data-nodegroup]')].map(r => r.dataset.nodegroup);
	  return {ok: rows.join(',') === 'workers', state: rows.join(',')}; })()`)
	b.expectNoReload()
	b.mu.Lock()
	confirmed := strings.Join(b.console, "\n")
	b.mu.Unlock()
	require.Contains(t, confirmed, "dialog accepted: Delete node group gpus of acme? Its 2 machines will be removed by the next apply.")
	code, _ := p.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/gpus", "")
	require.Equal(t, http.StatusNotFound, code)
}

// choose selects value in a select and fires change, as a user's pick does.
func (b *tab) choose(sel, value string) {
	b.t.Helper()
	b.t.Logf("[%s] choose %s = %q", b.name, sel, value)
	b.waitJS("choosing "+value+" in "+sel, 10*time.Second, `(() => {
	  const s = document.querySelector(`+jsString(sel)+`);
	  if (!s) return {ok: false, state: 'missing'};
	  s.value = `+jsString(value)+`;
	  s.dispatchEvent(new Event('change', {bubbles: true}));
	  return {ok: s.value === `+jsString(value)+`, state: s.value}; })()`)
}

// TestBrowserCreateTenantOpenStack creates a tenant on an OpenStack
// provider from the tenants page: choosing the provider brings its
// providerConfig fields, a missing required one is refused at the field, and
// the created node groups hold the fields, accepted by the API (there is no
// OpenStack cloud here: the apply itself is not expected to succeed).
func TestBrowserCreateTenantOpenStack(t *testing.T) {
	p, b := formsSession(t)
	mustAPI(t, p, http.MethodPost, "/api/v1/providers", `{"metadata":{"name":"emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:1"}}}`)
	mustAPI(t, p, http.MethodPost, "/api/v1/providers", `{"metadata":{"name":"os"},"spec":{"type":"openstack","config":{"authURL":"https://keystone.example.com:5000/v3"}}}`)

	b.open("/ui/tenants", `#tenant-create-provider-config[data-provider-type=emulated]`)
	b.choose(`#tenant-create select[name=provider]`, "os")
	b.waitJS("the OpenStack fields replace the emulated ones", 10*time.Second, `(() => {
	  const f = document.querySelector('#tenant-create-provider-config');
	  return {ok: !!f && f.dataset.providerType === 'openstack' && !!document.getElementById('tenant-create-pc-flavor'), state: f ? f.dataset.providerType : 'none'}; })()`)
	b.expectFocusRing("#tenant-create-pc-flavor")
	b.setValue(`#tenant-create input[name='metadata.name']`, "cloud")
	b.setValue("#tenant-create-pc-flavor", "m1.large")
	b.setValue("#tenant-create-pc-network", "private")
	b.setValue("#tenant-create-pc-securityGroups", "talos, default")
	b.click("[data-testid=create-tenant]")
	b.waitJS("the missing image is refused at its field", 10*time.Second, `(() => {
	  const e = document.querySelector('#tenant-create-pc-image ~ [data-field-error="spec.providerConfig.image"]');
	  return {ok: !!e, state: e ? e.textContent : 'no error yet'}; })()`)
	code, _ := p.do(http.MethodGet, "/api/v1/tenants/cloud", "")
	require.Equal(t, http.StatusNotFound, code, "a refused form leaves no tenant")

	b.setValue("#tenant-create-pc-image", "talos-v1.13.0")
	b.click("[data-testid=create-tenant]")
	b.waitPath("/ui/tenants/cloud", 15*time.Second)
	for _, g := range []string{"controlplane", "workers"} {
		ng := mustAPI(t, p, http.MethodGet, "/api/v1/tenants/cloud/nodegroups/"+g, "")
		spec := ng["spec"].(map[string]any)
		require.Equal(t, "os", spec["provider"])
		require.Equal(t, map[string]any{"flavor": "m1.large", "image": "talos-v1.13.0", "network": "private",
			"securityGroups": []any{"talos", "default"}}, spec["providerConfig"], g)
	}
}

// TestBrowserRegisterMetalMachine registers a machine on a tenant with a
// metal node group: a bad address is refused at the field; the registered
// machine shows as waiting in maintenance mode, selected by the group.
func TestBrowserRegisterMetalMachine(t *testing.T) {
	p, b := formsSession(t)
	mustAPI(t, p, http.MethodPost, "/api/v1/providers", `{"metadata":{"name":"rack"},"spec":{"type":"metal"}}`)
	mustAPI(t, p, http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"iron"},"spec":{}}`)
	mustAPI(t, p, http.MethodPost, "/api/v1/tenants/iron/nodegroups",
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":0,"provider":"rack","providerConfig":{"selector":"rack=r1","installDisk":"/dev/nvme0n1"}}}`)

	b.open("/ui/tenants/iron", "[data-testid=metal-link]")
	b.clickAndLoad("[data-testid=metal-link]")
	b.waitPath("/ui/tenants/iron/metal", 10*time.Second)
	b.waitLoaded()
	b.expectFocusRing("#metal-address")
	b.setValue("#metal-name", "node3")
	b.setValue("#metal-address", "10.0.0.13/24")
	b.setValue("#metal-labels", "rack=r1")
	b.click("[data-testid=register-machine]")
	b.waitJS("the bad address is refused at its field", 10*time.Second, `(() => {
	  const e = document.querySelector('#metal-address ~ [data-field-error="spec.address"]');
	  return {ok: !!e, state: e ? e.textContent : 'no error yet'}; })()`)
	b.setValue("#metal-address", "10.0.0.13")
	b.setValue("#metal-install-disk", "/dev/nvme1n1")
	b.click("[data-testid=register-machine]")
	b.waitJS("the machine is listed, in maintenance mode, selected by its group", 10*time.Second, `(() => {
	  const r = document.querySelector('tr[data-metal-machine=node3]');
	  const st = r ? r.querySelector('[data-testid=metal-state]').textContent.trim() : '', sel = r ? r.querySelector('[data-testid=metal-selection]').textContent.trim() : '';
	  return {ok: st.startsWith('maintenance mode') && sel === 'selected by workers (rack=r1)', state: st + ' | ' + sel}; })()`)
	m := mustAPI(t, p, http.MethodGet, "/api/v1/tenants/iron/machines/node3", "")
	require.Equal(t, "10.0.0.13", m["spec"].(map[string]any)["address"])
	require.Equal(t, "/dev/nvme1n1", m["metadata"].(map[string]any)["annotations"].(map[string]any)["rezuscloud.io/install-disk"])
}

// TestBrowserAddNodeGroupOpenStack adds a node group on an OpenStack
// provider from the tenant page: naming the provider brings its fields, and
// the group holds what was filled in.
func TestBrowserAddNodeGroupOpenStack(t *testing.T) {
	p, b := formsSession(t)
	mustAPI(t, p, http.MethodPost, "/api/v1/providers", `{"metadata":{"name":"emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:1"}}}`)
	mustAPI(t, p, http.MethodPost, "/api/v1/providers", `{"metadata":{"name":"os"},"spec":{"type":"openstack","config":{"authURL":"https://keystone.example.com:5000/v3"}}}`)
	mustAPI(t, p, http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"acme"},"spec":{}}`)

	b.open("/ui/tenants/acme", "#add-nodegroup summary")
	b.click("#add-nodegroup summary")
	b.choose(`#nodegroup-add input[name='spec.provider']`, "os")
	b.waitJS("the OpenStack fields show", 10*time.Second, `(() => {
	  const f = document.querySelector('#nodegroup-add-provider-config');
	  return {ok: !!f && f.dataset.providerType === 'openstack', state: f ? f.dataset.providerType : 'none'}; })()`)
	b.setValue(`#nodegroup-add input[name='metadata.name']`, "big")
	b.setValue("#nodegroup-add-pc-flavor", "m1.xlarge")
	b.setValue("#nodegroup-add-pc-image", "talos")
	b.setValue("#nodegroup-add-pc-network", "private")
	b.click("[data-testid=add-nodegroup]")
	b.waitJS("the group is created", 10*time.Second, `(() => {
	  const ok = [...document.querySelectorAll('#nodegroup-add [role=status], #nodegroup-add div')].some(n => n.textContent.includes('Node group big created.'));
	  return {ok, state: ok ? 'created' : 'not yet'}; })()`)
	ng := mustAPI(t, p, http.MethodGet, "/api/v1/tenants/acme/nodegroups/big", "")
	require.Equal(t, map[string]any{"flavor": "m1.xlarge", "image": "talos", "network": "private"}, ng["spec"].(map[string]any)["providerConfig"])
}
