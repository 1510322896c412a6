//go:build browser

package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// unlabelledJS lists the page's controls without an accessible name: a
// label (wrapping or for=), aria-label, aria-labelledby, a title, or for
// buttons, links and summaries their text. Hidden inputs are not controls.
const unlabelledJS = `(() => {
  const text = (n) => (n ? n.textContent : '').replace(/\s+/g, ' ').trim();
  const name = (el) => {
    const aria = (el.getAttribute('aria-label') || '').trim();
    if (aria) return aria;
    const by = el.getAttribute('aria-labelledby');
    if (by) return by.split(/\s+/).map(id => text(document.getElementById(id))).join(' ').trim();
    if (el.labels && el.labels.length) return [...el.labels].map(text).join(' ').trim();
    if (['BUTTON', 'A', 'SUMMARY'].includes(el.tagName) && text(el)) return text(el);
    if (el.tagName === 'INPUT' && ['submit', 'button', 'reset'].includes(el.type) && el.value) return el.value;
    return (el.getAttribute('title') || '').trim();
  };
  const controls = document.querySelectorAll('input:not([type=hidden]), select, textarea, button, summary, a[href]');
  const bad = [...controls].filter(el => !name(el)).map(el => el.outerHTML.slice(0, 160));
  return {ok: bad.length === 0, state: bad.length + ' unlabelled: ' + bad.join(' | ')};
})()`

// narrowJS checks a page at phone width: the body does not scroll
// sideways (wide tables scroll inside their own box), and the navigation
// and the page's main controls lie within the viewport's width.
const narrowJS = `(() => {
  const vw = document.documentElement.clientWidth;
  const sw = document.documentElement.scrollWidth, bw = document.body.scrollWidth;
  const main = [...document.querySelectorAll('header nav a, header nav summary, main h1, main form button[type=submit], main [data-testid] > button, main button[data-mutating]')]
    .filter(el => el.getClientRects().length > 0 && !el.closest('.overflow-x-auto'));
  const out = main.filter(el => { const r = el.getBoundingClientRect(); return r.left < -1 || r.right > vw + 1; })
    .map(el => el.outerHTML.slice(0, 100) + ' @' + Math.round(el.getBoundingClientRect().left) + '..' + Math.round(el.getBoundingClientRect().right));
  // What sticks out, for the failure message: the outermost elements that
  // reach past the viewport (a wide table in its own scroll box is one, and
  // harmless unless the page scrolls).
  const wide = [...document.body.querySelectorAll('*')].filter(el => el.getBoundingClientRect().right > vw + 1 &&
    !(el.parentElement && el.parentElement.getBoundingClientRect().right > vw + 1)).map(el => el.outerHTML.slice(0, 120));
  const ok = sw <= vw && bw <= vw && out.length === 0 && main.length > 0;
  return {ok, state: 'viewport ' + vw + ', page ' + sw + ', body ' + bw + ', ' + main.length + ' controls within it' +
            (out.length ? '; outside: ' + out.join(' | ') : '') + (!ok && wide.length ? '; sticking out: ' + wide.slice(0, 3).join(' | ') : '')};
})()`

// focusRingJS reports whether the focused element is the one sel names,
// is on screen and shows a focus ring: an outline of at least 2 px in a
// colour that is not transparent, or a box-shadow ring.
func focusRingJS(sel string) string {
	return `(() => {
  const el = document.activeElement;
  const want = document.querySelector(` + jsString(sel) + `);
  if (!el || el === document.body || el !== want) return {ok: false, state: 'focused: ' + (el ? el.outerHTML.slice(0, 80) : 'nothing')};
  const cs = getComputedStyle(el), r = el.getBoundingClientRect();
  const outline = cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) >= 2 && !/rgba\(.*, 0\)|transparent/.test(cs.outlineColor);
  const shadow = !!cs.boxShadow && cs.boxShadow !== 'none';
  return {ok: (outline || shadow) && r.width > 1 && r.height > 1,
          state: el.tagName + ' ' + (el.textContent || '').trim().slice(0, 30) + ': outline ' + cs.outlineStyle + ' ' + cs.outlineWidth + ' ' + cs.outlineColor + ', shadow ' + cs.boxShadow + ', ' + Math.round(r.width) + 'x' + Math.round(r.height)};
})()`
}

// TestBrowserAccessibleAndNarrow checks keyboard and screen-reader basics
// on the main pages (dashboard, tenants, a tenant, its state, settings and
// its sub-pages): every control has an accessible name, a keyboard focus
// shows a visible ring, and at 375 px wide the page body does not scroll
// sideways while the navigation and main controls stay within reach.
func TestBrowserAccessibleAndNarrow(t *testing.T) {
	chromium := findChromium(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir)
	adminPassword := strings.TrimSpace(string(waitFile(t, filepath.Join(dataDir, "initial-admin-password"))))
	code, body := p.do(http.MethodPost, "/api/v1/tenants", `{"apiVersion":"rezuscloud.io/v1","kind":"Tenant","metadata":{"name":"narrow"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)

	browserCtx := startBrowser(t, chromium)
	admin := newBrowserUser(t, browserCtx, p.url, "admin", "")
	defer admin.close()
	b := admin.on(t)
	b.open("/ui/login", "form[action='/ui/login']")
	b.waitJS("the sign-in page's controls are labelled", 10*time.Second, unlabelledJS)
	b.signIn("admin", adminPassword)

	pages := []string{"/ui/", "/ui/tenants", "/ui/tenants/narrow", "/ui/tenants/narrow/state", "/ui/settings",
		"/ui/settings/users", "/ui/settings/tokens", "/ui/settings/providers", "/ui/settings/audit"}
	t.Run("labelled_and_focus_visible", func(t *testing.T) {
		b := admin.on(t)
		for _, path := range pages {
			b.openPage(path)
			b.expectJS(path+": every control is labelled", unlabelledJS)
		}
		b.openPage("/ui/")
		b.run("tabbing into the page", 10*time.Second, chromedp.KeyEvent("\t"))
		b.waitJS("the first tab stop is the skip link, shown with a focus ring", 10*time.Second, focusRingJS("[data-testid=skip-link]"))
		b.run("tabbing on", 10*time.Second, chromedp.KeyEvent("\t"))
		b.waitJS("the next is the header's first link, with a focus ring", 10*time.Second, focusRingJS("header nav a"))
		b.openPage("/ui/tenants")
		b.run("focusing the label filter", 10*time.Second, chromedp.Focus(chromedp.CSS("[data-testid=label-filter]")))
		b.waitJS("a focused input shows its ring", 10*time.Second, focusRingJS("[data-testid=label-filter]"))
	})
	t.Run("usable_at_375px", func(t *testing.T) {
		b := admin.on(t)
		b.run("narrowing the viewport", 10*time.Second, chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile))
		for _, path := range pages {
			b.openPage(path)
			b.expectJS(path+" fits 375 px", narrowJS)
		}
	})
}

// expectJS evaluates expr, which returns {ok, state}, once on the loaded
// page and reports an error (the test goes on to the next page) unless ok.
func (b *tab) expectJS(what, expr string) {
	b.t.Helper()
	type result struct {
		OK    bool   `json:"ok"`
		State string `json:"state"`
	}
	r, err := chromedp.Run(b.ctx, chromedp.Evaluate[result](expr))
	b.check(err, what)
	if !r.OK {
		b.t.Errorf("%s: %s", what, r.State)
		return
	}
	b.t.Logf("%s: %s", what, r.State)
}
