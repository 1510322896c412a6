//go:build browser

package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowser drives the web UI in headless Chromium against a real server
// (embedded NATS, the Talos emulator, tofu from the tools dir): sign-in, a
// tenant created through the form, its machines appearing live, scaling, a
// rolling upgrade (the Upgrade button declares the tenant's Talos version),
// a Kubernetes version declared beside it, sign-out, and a read-only user who
// sees no mutating control. Run it with `go tool task test:browser` (after `go tool task
// tools`); Chromium must be installed (REZUS_CHROMIUM names another binary).
//
// With REZUS_SCREENSHOTS=<dir> it also saves full-page screenshots of the main
// pages there (`go tool task screenshots` writes docs/screenshots).
//
// Each step is a subtest; a step that fails saves a screenshot and the page's
// HTML and prints their paths, and the independent steps after it still run.
func TestBrowser(t *testing.T) {
	chromium := findChromium(t)
	dataDir := t.TempDir()
	p := startInfraServer(t, dataDir)
	adminPassword := strings.TrimSpace(string(waitFile(t, filepath.Join(dataDir, "initial-admin-password"))))

	shots := os.Getenv("REZUS_SCREENSHOTS")
	if shots != "" {
		require.NoError(t, os.MkdirAll(shots, 0o755))
	}

	browserCtx := startBrowser(t, chromium)
	const tenant = "demo"
	admin := newBrowserUser(t, browserCtx, p.url, "admin", shots)
	defer admin.close()

	mustStep := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	mustStep("1_sign_in_as_admin", func(t *testing.T) {
		b := admin.on(t)
		b.open("/ui/login", "form[action='/ui/login']")
		b.screenshot("login.png")
		b.signIn("admin", adminPassword)
		b.expectText("[data-testid=user-name]", "admin")
		b.expectText("[data-testid=user-role]", "admin")
	})

	mustStep("2_create_tenant_through_the_form", func(t *testing.T) {
		b := admin.on(t)
		b.open("/ui/tenants", "form[data-testid=tenant-create]")
		b.waitJS("the emulated provider is offered", 30*time.Second,
			`(() => { const o = document.querySelector('form[data-testid=tenant-create] select[name=provider] option[value=emulated]');
			  return {ok: !!o, state: o ? 'offered' : 'not offered'}; })()`)
		b.setValue(`form[data-testid=tenant-create] input[name="metadata.name"]`, tenant)
		b.setValue(`form[data-testid=tenant-create] select[name=provider]`, "emulated")
		b.setValue(`form[data-testid=tenant-create] input[name=controlPlanes]`, "1")
		b.setValue(`form[data-testid=tenant-create] input[name=workers]`, "1")
		b.click(`form[data-testid=tenant-create] button[data-testid=create-tenant]`)
		b.waitJS("htmx redirects to /ui/tenants/"+tenant, 30*time.Second,
			`({ok: location.pathname === '/ui/tenants/`+tenant+`', state: location.pathname + ' ' +
			  ((document.querySelector('[data-testid=form-error]') || {}).textContent || '').trim()})`)
	})

	tenantPage := "/ui/tenants/" + tenant
	t.Run("3_machines_appear_live", func(t *testing.T) {
		// Readiness is observed on demand through the Talos API: the open
		// tenant page is that demand (it asks for the tenant's health while
		// open). The dashboard, open in another tab, shows the same change
		// arrive without a reload.
		page := admin.on(t)
		page.open(tenantPage, "#machines")
		page.markNoReload()
		dash := admin.on(t)
		machines := `#dash-fleet [data-testid=fleet-machines]`
		dash.open("/ui/", machines)
		dash.markNoReload()
		dash.waitJS("the dashboard's fleet reaches 2/2 machines ready, live", 3*time.Minute,
			`(() => { const c = document.querySelector('`+machines+`');
			  const s = c ? c.textContent.replace(/\s+/g, ' ').trim() : 'no fleet';
			  return {ok: s === '2/2 ready', state: s}; })()`)
		dash.expectNoReload()
		page.waitMachines(2, true, 3*time.Minute)
		page.expectNoReload()
	})

	t.Run("4_scale_workers_up", func(t *testing.T) {
		admin.on(t).scaleUp(tenantPage, "workers", 2, 3)
	})

	t.Run("5_rolling_upgrade", func(t *testing.T) {
		// The saga refuses to start on machines it cannot reach: wait for a
		// healthy cluster first, as an operator would.
		waitHealthy(t, p, tenant, 3*time.Minute)
		admin.on(t).upgrade(tenantPage, "v1.13.1", 3)
	})

	t.Run("5b_declare_kubernetes_version", func(t *testing.T) {
		admin.on(t).declareKubernetes(tenantPage, 3)
	})

	t.Run("5c_rollout_page", func(t *testing.T) {
		// A rollout started from its page reaches the tenant, which runs
		// the target already: the wave's tile turns Done live.
		b := admin.on(t)
		b.open("/ui/rollouts", "form[data-testid=rollout-create]")
		b.setValue(`form[data-testid=rollout-create] input[name="metadata.name"]`, "to-1-13-1")
		b.setValue(`form[data-testid=rollout-create] input[name=version]`, "v1.13.1")
		b.setValue(`form[data-testid=rollout-create] input[name="spec.waves"]`, "100%")
		b.setValue(`form[data-testid=rollout-create] input[name="spec.soak"]`, "1s")
		b.click(`form[data-testid=rollout-create] button[data-testid=create-rollout]`)
		b.waitJS("htmx redirects to the rollout's page", 30*time.Second,
			`({ok: location.pathname === '/ui/rollouts/to-1-13-1', state: location.pathname + ' ' +
			  ((document.querySelector('[data-testid=form-error]') || {}).textContent || '').trim()})`)
		b.markNoReload()
		b.waitJS("the tenant's tile is Done and the rollout Succeeded, live", time.Minute,
			`(() => { const tile = document.querySelector('[data-testid=rollout-waves] [data-tenant="`+tenant+`"]');
			  const phase = document.querySelector('[data-testid=rollout-summary] [data-phase]');
			  const s = (tile ? tile.dataset.state : 'no tile') + ' ' + (phase ? phase.dataset.phase : 'no phase');
			  return {ok: s === 'Done Succeeded', state: s}; })()`)
		b.expectNoReload()
	})

	if shots != "" {
		t.Run("screenshots", func(t *testing.T) {
			pages := []struct{ file, path string }{
				{"dashboard.png", "/ui/"},
				{"tenants.png", "/ui/tenants"},
				{"tenant.png", tenantPage},
				{"machine.png", ""},
				{"settings.png", "/ui/settings"},
			}
			for _, pg := range pages {
				t.Run(pg.file, func(t *testing.T) {
					b := admin.on(t)
					path := pg.path
					if pg.file == "machine.png" {
						m := firstMachine(t, p, tenant)
						if m == "" {
							t.Fatalf("tenant %s has no machine for machine.png", tenant)
						}
						path = tenantPage + "/machines/" + m
					}
					b.openPage(path)
					b.screenshot(pg.file)
					if pg.file == "dashboard.png" {
						b.screenshotAt(390, 844, "dashboard-phone.png")
					}
				})
			}
		})
	}

	t.Run("6_sign_out", func(t *testing.T) {
		b := admin.on(t)
		b.open("/ui/", "#user-menu")
		b.click("#user-menu summary")
		b.clickAndLoad("[data-testid=sign-out]")
		b.waitPath("/ui/login", 30*time.Second)
		b.navigate("/ui/")
		b.waitPath("/ui/login", 30*time.Second)
	})

	t.Run("7_view_user_sees_no_mutating_control", func(t *testing.T) {
		code, body := p.do(http.MethodPost, "/api/v1/users",
			`{"metadata":{"name":"viewer"},"spec":{"role":"view","password":"viewer password 1"}}`)
		require.Equal(t, http.StatusCreated, code, body)
		viewer := newBrowserUser(t, browserCtx, p.url, "viewer", "")
		defer viewer.close()
		b := viewer.on(t)
		b.open("/ui/login", "form[action='/ui/login']")
		b.signIn("viewer", "viewer password 1")
		// Controls a viewer may use on their own account (password, own API
		// tokens) are marked data-self-service, not data-mutating.
		for _, path := range []string{"/ui/", "/ui/tenants", tenantPage, tenantPage + "/machines/" + firstMachine(t, p, tenant),
			"/ui/settings", "/ui/settings/tokens", "/ui/settings/providers"} {
			t.Run(strings.Trim(strings.ReplaceAll(path, "/", "_"), "_"), func(t *testing.T) {
				b := viewer.on(t)
				b.openPage(path)
				b.expectText("[data-testid=user-role]", "view")
				n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-mutating]').length`))
				b.check(err, "counting [data-mutating]")
				if n != 0 {
					b.fail("%s shows %d mutating controls to a view user", path, n)
				}
			})
		}
	})
}

// scaleUp clicks a node group's scale-up button on the tenant page and waits,
// without a reload, for the group's new count and the machine rows (all
// ready in the end).
func (b *tab) scaleUp(tenantPage, group string, count, machines int) {
	b.t.Helper()
	row := `tr[data-nodegroup="` + group + `"]`
	b.open(tenantPage, row+" button[data-testid=scale-up]")
	b.markNoReload()
	b.click(row + " button[data-testid=scale-up]")
	b.waitJS(fmt.Sprintf("the %s node group's count becomes %d", group, count), time.Minute, fmt.Sprintf(
		`(() => { const c = document.querySelector(%s);
		  const s = c ? c.textContent.trim() : 'no count cell';
		  return {ok: s === '%d', state: s}; })()`, jsString(row+" td[data-testid=nodegroup-count]"), count))
	b.waitMachines(machines, false, 3*time.Minute)
	b.waitMachines(machines, true, 3*time.Minute)
	b.expectNoReload()
}

// upgrade starts a Talos upgrade from the tenant page's form and waits,
// without a reload, until its progress reads N/N with a row per machine.
func (b *tab) upgrade(tenantPage, version string, machines int) {
	b.t.Helper()
	b.open(tenantPage, "[data-testid=upgrade-form]")
	b.markNoReload()
	b.setValue(`[data-testid=upgrade-form] input[name=talosVersion]`, version)
	b.click(`[data-testid=start-upgrade]`)
	b.waitJS("an upgrade row appears", time.Minute,
		`(() => { const n = document.querySelectorAll('tr[data-upgrade]').length; return {ok: n > 0, state: n + ' upgrade rows'}; })()`)
	b.waitJS(fmt.Sprintf("the upgrade's progress reaches %d/%d with a row per machine", machines, machines), 4*time.Minute, fmt.Sprintf(
		`(() => { const r = document.querySelector('tr[data-upgrade]');
		  const p = (r && r.querySelector('[data-testid=upgrade-progress]')) || document.querySelector('[data-testid=upgrade-progress]');
		  const s = p ? p.textContent.trim() : 'no progress cell';
		  const m = s.match(/(\d+)\s*\/\s*(\d+)/);
		  const rows = [...document.querySelectorAll('tr[data-upgrade-machine]')];
		  const ph = r && r.querySelector('[data-phase]');
		  const ok = !!m && m[1] === m[2] && +m[2] === %d && rows.length === %d;
		  return {ok, state: 'progress ' + s + ', ' + rows.length + ' machine rows, phase ' + (ph ? ph.dataset.phase : '?') + ': ' +
		    rows.map(x => x.dataset.upgradeMachine + '=' + x.textContent.replace(/\s+/g, ' ').trim()).join('; ')}; })()`,
		machines, machines))
	b.expectNoReload()
}

// declareKubernetes declares the next patch of the tenant's Kubernetes version
// with the control beside the Upgrade button and waits, without a reload, for
// the confirmation and the live overview to show it; every machine row shows
// its CONFIG state.
func (b *tab) declareKubernetes(tenantPage string, machines int) {
	b.t.Helper()
	form := "[data-testid=kubernetes-upgrade-form]"
	b.open(tenantPage, form)
	b.markNoReload()
	declared, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid=declared-kubernetes]').textContent.trim()`))
	b.check(err, "reading the declared Kubernetes version")
	i := strings.LastIndex(declared, ".")
	patch, err := strconv.Atoi(declared[i+1:])
	b.check(err, "reading the patch number of "+declared)
	next := declared[:i+1] + strconv.Itoa(patch+1)
	b.setValue(form+" input[name=kubernetesVersion]", next)
	b.click("[data-testid=start-kubernetes-upgrade]")
	b.waitJS("the forms confirm "+next, 30*time.Second, fmt.Sprintf(
		`(() => { const f = document.querySelector('#version-forms [data-testid=flash-ok]');
		  const e = document.querySelector('#version-forms [data-testid=form-error]');
		  const s = f ? f.textContent.trim() : (e ? 'refused: ' + e.textContent.trim() : 'no answer yet');
		  return {ok: s.includes('now declares Kubernetes ' + %s), fail: e ? s : '', state: s}; })()`, jsString(next)))
	b.waitJS("the overview shows "+next+", live", 30*time.Second, fmt.Sprintf(
		`(() => { const n = document.querySelector('[data-testid=tenant-kubernetes]'); const s = n ? n.textContent.trim() : '(missing)';
		  return {ok: s.startsWith(%s), state: s}; })()`, jsString(next)))
	b.waitJS(fmt.Sprintf("%d machine rows show their CONFIG", machines), 30*time.Second, fmt.Sprintf(
		`(() => { const rows = [...document.querySelectorAll('#machines tr[data-machine]')];
		  const states = rows.map(r => { const c = r.querySelector('[data-config-state]'); return r.dataset.machine + '=' + (c ? c.dataset.configState : '?'); });
		  return {ok: rows.length === %d && states.every(x => !x.endsWith('=?')), state: states.join(', ')}; })()`, machines))
	b.expectNoReload()
}
