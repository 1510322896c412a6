//go:build browser

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowser drives the web UI in headless Chromium against a real server
// (embedded NATS, the Talos emulator, tofu from the tools dir): sign-in, a
// tenant created through the form, its machines appearing live, scaling, a
// rolling upgrade, sign-out, and a read-only user who sees no mutating
// control. Run it with `go tool task test:browser` (after `go tool task
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
		row := `#dash-tenants tr[data-tenant="` + tenant + `"]`
		dash.open("/ui/", row)
		dash.markNoReload()
		dash.waitJS("the dashboard row of "+tenant+" reaches 2/2 machines ready, live", 3*time.Minute,
			`(() => { const c = document.querySelector('`+row+` td[data-testid=machines-ready]');
			  const s = c ? c.textContent.trim() : 'no row';
			  return {ok: s === '2/2', state: s}; })()`)
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

// startBrowser starts headless Chromium for the test; it stops with the test.
func startBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.DisableGPU, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true), chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("disable-renderer-backgrounding", true), chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true))
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// Start the browser now, so a broken Chromium fails here with its own error.
	if err := chromedp.Do(browserCtx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting Chromium %s: %v (install chromium, or set REZUS_CHROMIUM)", chromium, err)
	}
	return browserCtx
}

// findChromium finds the browser or fails: the browser tests are never skipped.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("REZUS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("Chromium not found: the browser tests need it (apt-get install chromium, or set REZUS_CHROMIUM to the binary)")
	return ""
}

// waitHealthy waits until the tenant's health check says Ready.
func waitHealthy(t *testing.T, p *proc, tenant string, d time.Duration) {
	t.Helper()
	t.Logf("waiting up to %s: tenant %s healthy (API)", d, tenant)
	deadline := time.Now().Add(d)
	last := ""
	for {
		code, h := p.do(http.MethodGet, "/api/v1/tenants/"+tenant+"/health?refresh=true", "")
		state := fmt.Sprint(h["state"])
		if code == http.StatusOK && state == "Ready" {
			return
		}
		if state != last {
			t.Logf("  health: %d %s", code, state)
			last = state
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant %s not healthy within %s: %d %v", tenant, d, code, h)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// firstMachine names a machine of the tenant, from the API.
func firstMachine(t *testing.T, p *proc, tenant string) string {
	code, l := p.do(http.MethodGet, "/api/v1/tenants/"+tenant+"/machines", "")
	if code != http.StatusOK {
		t.Logf("listing machines: %d %v", code, l)
		return ""
	}
	items, _ := l["items"].([]any)
	for _, it := range items {
		md, _ := it.(map[string]any)["metadata"].(map[string]any)
		if n, _ := md["name"].(string); n != "" {
			return n
		}
	}
	return ""
}

// browserUser is one user's browser context (own cookies). Each step opens
// its own tab in it (on), so a tab a failed step left behind cannot stall the
// next one.
type browserUser struct {
	ctx    context.Context
	cancel context.CancelFunc
	base   string
	name   string
	shots  string
}

func newBrowserUser(t *testing.T, browserCtx context.Context, base, name, shots string) *browserUser {
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		t.Fatalf("opening a browser context for %s: %v", name, err)
	}
	return &browserUser{ctx: ctx, cancel: cancel, base: base, name: name, shots: shots}
}

func (u *browserUser) close() { u.cancel() }

// on opens a new tab of the user at desktop width for a (sub)test, closed when
// the test ends. The tab collects console errors and uncaught exceptions for
// failure reports, and accepts dialogs (hx-confirm) as a user would.
func (u *browserUser) on(t *testing.T) *tab {
	ctx, cancel := chromedp.NewContext(u.ctx)
	t.Cleanup(cancel)
	b := &tab{browserUser: u, t: t, ctx: ctx}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("opening a tab for %s: %v", u.name, err)
	}
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleWarning {
				b.note(fmt.Sprintf("%s %s: %s (%s:%d)", m.Time.Format("15:04:05.000"), m.Type, m.Text, m.URL, m.Line))
			}
		}
	}()
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.note("dialog accepted: " + ev.Message)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return b
}

type tab struct {
	*browserUser
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	console []string
}

func (b *tab) note(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.console = append(b.console, line)
}

// fail saves a screenshot and the page's HTML, prints where, and fails the test.
func (b *tab) fail(format string, args ...any) {
	b.t.Helper()
	msg := fmt.Sprintf(format, args...)
	b.t.Logf("FAILED (%s): %s", b.name, msg)
	b.dumpForDiagnosis()
	b.t.FailNow()
}

func (b *tab) check(err error, what string) {
	b.t.Helper()
	if err != nil {
		b.fail("%s: %v", what, err)
	}
}

// dumpForDiagnosis writes the page's screenshot and HTML into a directory that
// outlives the test (t.TempDir would be removed with it) and logs the paths,
// the URL and the browser console.
func (b *tab) dumpForDiagnosis() {
	dir, err := os.MkdirTemp("", "rezus-browser-"+strings.ReplaceAll(b.t.Name(), "/", "-")+"-")
	if err != nil {
		b.t.Logf("no directory for the failure's screenshot: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err == nil {
		b.t.Logf("page URL: %s", loc)
	}
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		f := filepath.Join(dir, "page.png")
		if os.WriteFile(f, png, 0o644) == nil {
			b.t.Logf("screenshot: %s", f)
		}
	} else {
		b.t.Logf("no screenshot: %v", err)
	}
	if html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`)); err == nil {
		f := filepath.Join(dir, "page.html")
		if os.WriteFile(f, []byte(html), 0o644) == nil {
			b.t.Logf("page HTML: %s", f)
		}
	}
	if log, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__htmx || []`)); err == nil && len(log) > 0 {
		b.t.Logf("htmx events of the page:\n  %s", strings.Join(log, "\n  "))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.console) > 0 {
		b.t.Logf("browser console of %s:\n  %s", b.name, strings.Join(b.console, "\n  "))
	}
}

func (b *tab) run(what string, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	b.check(chromedp.Do(ctx, steps...), what)
}

func (b *tab) navigate(path string) {
	b.t.Helper()
	b.t.Logf("[%s] open %s", b.name, path)
	b.run("opening "+path, 30*time.Second, chromedp.Navigate(b.base+path))
}

// open loads a page and waits until sel is there and the page's scripts ran.
func (b *tab) open(path, sel string) {
	b.t.Helper()
	b.navigate(path)
	b.waitJS(sel+" is on the page", 30*time.Second, `(() => {
		const e = document.querySelector('[data-testid=error-message]');
		if (e) return {ok: false, fail: document.title + ': ' + e.textContent.trim(), state: 'error page'};
		const found = !!document.querySelector(`+jsString(sel)+`);
		return {ok: found, state: found ? 'found' : 'not there yet'}; })()`)
	b.waitLoaded()
	b.recordHTMX()
}

// recordHTMX keeps the page's htmx requests and SSE connection events in
// window.__htmx, so a failure report says what the page asked and heard.
func (b *tab) recordHTMX() {
	_, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(() => {
		window.__htmx = [];
		const note = (s) => { window.__htmx.push(new Date().toISOString().slice(11, 23) + ' ' + s); if (window.__htmx.length > 300) window.__htmx.shift(); };
		for (const ev of ['htmx:beforeRequest', 'htmx:afterRequest', 'htmx:sendError', 'htmx:responseError', 'htmx:sseOpen', 'htmx:sseError', 'htmx:sseClose', 'htmx:swapError', 'htmx:targetError']) {
			document.body.addEventListener(ev, (e) => {
				const d = e.detail || {};
				const path = (d.pathInfo && d.pathInfo.requestPath) || (d.requestConfig && d.requestConfig.path) || '';
				note(ev + ' ' + path + (d.xhr ? ' -> ' + d.xhr.status : '') + (d.error ? ' ' + d.error : ''));
			});
		}
		document.body.addEventListener('htmx:sseMessage', (e) => note('sse ' + ((e.detail && e.detail.type) || '')));
		return true; })()`))
	b.check(err, "recording htmx events")
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// openPage loads a page that must not be an error page.
func (b *tab) openPage(path string) {
	b.t.Helper()
	b.navigate(path)
	b.waitLoaded()
	msg, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](
		`(() => { const e = document.querySelector('[data-testid=error-message]'); return e ? document.title + ': ' + e.textContent.trim() : ''; })()`))
	b.check(err, "reading the page")
	if msg != "" {
		b.fail("%s is an error page: %s", path, msg)
	}
}

func (b *tab) waitLoaded() {
	b.t.Helper()
	b.waitJS("the page has loaded", 30*time.Second,
		`({ok: document.readyState === 'complete' && (!document.querySelector('script[src*="htmx"]') || !!window.htmx), state: document.readyState})`)
}

func (b *tab) waitPath(path string, d time.Duration) {
	b.t.Helper()
	b.waitJS("the browser is at "+path, d, `({ok: location.pathname === '`+path+`', state: location.pathname})`)
}

func (b *tab) setValue(sel, value string) {
	b.t.Helper()
	b.t.Logf("[%s] set %s = %q", b.name, sel, value)
	b.run("setting "+sel, 10*time.Second, chromedp.WaitReady(chromedp.CSS(sel)), chromedp.SetValue(chromedp.CSS(sel), value))
}

func (b *tab) click(sel string) {
	b.t.Helper()
	b.t.Logf("[%s] click %s", b.name, sel)
	// A live fragment may be swapped between finding the element and
	// clicking it (the page's stream re-sends every fragment on connect): a
	// click on a node that is gone is tried again on the new one, as a user
	// would click again.
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil || attempt == 5 || !staleNode(err) {
			b.check(err, "clicking "+sel)
			return
		}
		b.t.Logf("[%s]   the element was replaced while clicking (%v); again", b.name, err)
	}
}

// staleNode reports whether err says the element went away under the action.
func staleNode(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Could not find node") || strings.Contains(msg, "not attached") || strings.Contains(msg, "No node with given id")
}

// clickAndLoad clicks something that loads a new document (a plain form's
// submit button) and waits for the new document's load event.
func (b *tab) clickAndLoad(sel string) {
	b.t.Helper()
	b.t.Logf("[%s] click %s and wait for the next page", b.name, sel)
	b.run("waiting for "+sel, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(sel)))
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel))))
	b.check(err, "clicking "+sel+" and loading the next page")
}

func (b *tab) signIn(user, password string) {
	b.t.Helper()
	b.t.Logf("[%s] sign in as %s", b.name, user)
	b.run("filling the sign-in form", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("input[name=username]"), user),
		chromedp.SendKeys(chromedp.CSS("input[name=password]"), password))
	b.clickAndLoad("form[action='/ui/login'] button[type=submit]")
	b.waitJS("signed in: the user menu shows "+user, 30*time.Second,
		`(() => { const n = document.querySelector('[data-testid=user-name]');
		  const e = document.querySelector('[data-testid=login-error]');
		  return {ok: !!n && n.textContent.trim() === '`+user+`', state: location.pathname + (e ? ' error: ' + e.textContent.trim() : '')}; })()`)
	b.waitLoaded()
}

func (b *tab) expectText(sel, want string) {
	b.t.Helper()
	b.waitJS(sel+" says "+want, 10*time.Second,
		`(() => { const n = document.querySelector('`+sel+`'); const s = n ? n.textContent.trim() : '(missing)'; return {ok: s === '`+want+`', state: s}; })()`)
}

// markNoReload marks the document: a reload or navigation drops the mark.
func (b *tab) markNoReload() {
	b.t.Helper()
	b.run("marking the page", 10*time.Second, chromedp.Evaluate[chromedp.Void](`window.__noReload = 1`))
}

func (b *tab) expectNoReload() {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`window.__noReload || 0`))
	b.check(err, "reading the no-reload mark")
	if v != 1 {
		b.fail("the page was reloaded while waiting (window.__noReload is gone)")
	}
}

// waitMachines waits for n rows in the tenant page's machine table, all ready
// when ready is set.
func (b *tab) waitMachines(n int, ready bool, d time.Duration) {
	b.t.Helper()
	what := fmt.Sprintf("%d machine rows", n)
	if ready {
		what += ", all ready"
	}
	b.waitJS(what+", live", d, fmt.Sprintf(
		`(() => { const rows = [...document.querySelectorAll('#machines tr[data-machine]')];
		  const cell = (r, id) => { const c = r.querySelector('td[data-testid=' + id + ']'); return c ? c.textContent.trim() : '?'; };
		  const ok = rows.length === %d && (!%t || rows.every(r => cell(r, 'machine-ready') === 'yes'));
		  return {ok, state: rows.length + ' rows: ' + rows.map(r => r.dataset.machine + ' ready=' + cell(r, 'machine-ready') + ' stage=' + cell(r, 'machine-stage')).join(', ')}; })()`,
		n, ready))
}

// waitJS evaluates expr, which returns {ok, state, fail?}, until ok (or fail
// is set); it logs each new state, so the test output shows the page changing.
func (b *tab) waitJS(what string, d time.Duration, expr string) {
	b.t.Helper()
	b.t.Logf("[%s] waiting up to %s: %s", b.name, d, what)
	type result struct {
		OK    bool   `json:"ok"`
		State string `json:"state"`
		// Fail ends the wait at once, failing the test.
		Fail string `json:"fail"`
	}
	start := time.Now()
	deadline := start.Add(d)
	last := "\x00"
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		r, err := chromedp.Run(ctx, chromedp.Evaluate[result](expr))
		cancel()
		if err == nil {
			if r.State != last {
				b.t.Logf("[%s]   %5.1fs %s", b.name, time.Since(start).Seconds(), r.State)
				last = r.State
			}
			if r.OK {
				return
			}
			if r.Fail != "" {
				b.fail("%s: %s", what, r.Fail)
			}
		} else if lastErr == nil || err.Error() != lastErr.Error() {
			// A navigation in progress destroys the context; try again.
			b.t.Logf("[%s]   %5.1fs (%v)", b.name, time.Since(start).Seconds(), err)
		}
		lastErr = err
		if time.Now().After(deadline) {
			if err != nil {
				b.fail("not within %s: %s (last error: %v)", d, what, err)
			}
			b.fail("not within %s: %s (last state: %s)", d, what, last)
		}
		select {
		case <-b.ctx.Done():
			b.fail("the browser went away: %v", b.ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var shotName = regexp.MustCompile(`^[a-z0-9-]+\.png$`)

// screenshot saves a full-page PNG into REZUS_SCREENSHOTS, when set.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	if !shotName.MatchString(name) {
		b.t.Fatalf("bad screenshot name %q", name)
	}
	// Let transitions and pending swaps settle before the capture.
	b.run("settling before "+name, 10*time.Second, chromedp.Evaluate[chromedp.Void](
		`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))`, chromedp.EvalAwaitPromise))
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	b.check(err, "screenshot "+name)
	f := filepath.Join(b.shots, name)
	b.check(os.WriteFile(f, png, 0o644), "writing "+f)
	b.t.Logf("[%s] screenshot %s (%d KiB)", b.name, f, len(png)/1024)
}

// screenshotAt saves a screenshot at another viewport width (a phone's), then
// goes back to the desktop width.
func (b *tab) screenshotAt(width, height int64, name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	b.run("narrowing the viewport", 10*time.Second, chromedp.EmulateViewport(width, height, chromedp.EmulateScale(2)))
	defer b.run("restoring the viewport", 10*time.Second, chromedp.EmulateViewport(1280, 900))
	b.screenshot(name)
}
