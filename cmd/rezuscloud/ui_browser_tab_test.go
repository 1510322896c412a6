//go:build browser

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

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
	//
	// A click lands where the element was when its box was measured: a live
	// fragment above it that grows (a condition row added to the overview)
	// moves it between the two, and the click hits something else. So the
	// element's box must be still for two looks 50 ms apart first.
	steady := chromedp.Poll[chromedp.Void](`(() => { const e = document.querySelector(`+jsString(sel)+`);
	  if (!e) return false;
	  const r = e.getBoundingClientRect(), k = [r.x, r.y, r.width, r.height].join(',');
	  const same = window.__rezusClickBox === k; window.__rezusClickBox = k; return same; })()`,
		chromedp.WithPollingInterval(50*time.Millisecond))
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.ScrollIntoView(chromedp.CSS(sel)), steady, chromedp.Click(chromedp.CSS(sel)))
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
