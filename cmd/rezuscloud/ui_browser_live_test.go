//go:build browser

package main

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// setHidden minimizes the tab's window (the page becomes hidden, as when the
// user switches to another tab: visibilitychange fires) or restores it.
func (b *tab) setHidden(hidden bool) {
	b.t.Helper()
	w, err := chromedp.Call(b.ctx, browser.GetWindowForTarget, browser.GetWindowForTargetParams{})
	b.check(err, "finding the tab's window")
	state := browser.WindowStateNormal
	if hidden {
		state = browser.WindowStateMinimized
	}
	_, err = chromedp.Call(b.ctx, browser.SetWindowBounds, browser.SetWindowBoundsParams{WindowID: w.WindowID, Bounds: &browser.Bounds{WindowState: state}})
	b.check(err, "setting the tab's window "+string(state))
	want := "visible"
	if hidden {
		want = "hidden"
	}
	b.waitJS("the page is "+want, 10*time.Second, `({ok: document.visibilityState === '`+want+`', state: document.visibilityState})`)
}

// streamsJS reports the page's live streams (static/live.js): ok when every
// one is in the wanted state (1 open, 2 closed) and resting as wanted.
func streamsJS(readyState int, resting bool) string {
	return fmt.Sprintf(`(() => { const s = window.rezusLive ? window.rezusLive.streams() : [];
	  const ok = s.length > 0 && s.every(x => x.state === %d && x.resting === %t);
	  return {ok, state: JSON.stringify(s)}; })()`, readyState, resting)
}

// TestBrowserHiddenTabsRest opens eight tabs of live pages in one browser
// over HTTP/1.1, which allows six connections per origin: each tab's live
// stream is closed while its page is hidden (the window minimized), so the
// eighth page still loads and connects. A tenant created while a tab is
// hidden appears in it once it shows again, without a reload, over a stream
// reopened with ?seen= digests of what the page showed; the page's digest
// is the server's (FNV-1a 64 in base 36 of the event's data).
func TestBrowserHiddenTabsRest(t *testing.T) {
	chromium := findChromium(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir)
	adminPassword := strings.TrimSpace(string(waitFile(t, filepath.Join(dataDir, "initial-admin-password"))))

	browserCtx := startBrowser(t, chromium)
	admin := newBrowserUser(t, browserCtx, p.url, "admin", "")
	defer admin.close()
	first := admin.on(t)
	first.open("/ui/login", "form[action='/ui/login']")
	first.signIn("admin", adminPassword)

	sample := "<div id=\"x\">été ✓</div>\n<p>two</p>"
	h := fnv.New64a()
	h.Write([]byte(sample))
	digest, err := chromedp.Run(first.ctx, chromedp.Evaluate[string](`window.rezusLive.digest(`+jsString(sample)+`)`))
	first.check(err, "digesting in the page")
	require.Equal(t, strconv.FormatUint(h.Sum64(), 36), digest, "the page's digest is the server's")

	// A waiting step's durations move on in the page as the server words them.
	for _, d := range []time.Duration{0, 45 * time.Second, 250 * time.Second, 4 * time.Minute, 2*time.Hour + 5*time.Second,
		2*time.Hour + 5*time.Minute, 2 * time.Hour, 25*time.Hour + 1500*time.Millisecond} {
		got, err := chromedp.Run(first.ctx, chromedp.Evaluate[string](fmt.Sprintf(`window.rezusWaits.shortDuration(%d)`, d.Milliseconds())))
		first.check(err, "a duration in the page")
		require.Equal(t, domain.ShortDuration(d), got, "%s", d)
	}
	ticked, err := chromedp.Run(first.ctx, chromedp.Evaluate[string](`(() => {
	  const el = document.createElement('span'), now = Date.now();
	  el.dataset.waitSince = new Date(now - 250000).toISOString();
	  el.dataset.waitDeadline = new Date(now + 350400).toISOString();
	  el.innerHTML = 'waiting for x, <span data-wait-elapsed>0s</span> <span data-wait-left>(fails in 10m)</span>';
	  document.body.append(el);
	  window.rezusWaits.tick();
	  el.remove();
	  return el.textContent; })()`))
	first.check(err, "ticking a wait")
	require.Equal(t, "waiting for x, 4m10s (fails in 5m50s)", ticked)

	pages := []string{"/ui/tenants", "/ui/", "/ui/tenants", "/ui/", "/ui/tenants", "/ui/", "/ui/tenants", "/ui/tenants"}
	var tabs []*tab
	for i, path := range pages {
		b := admin.on(t)
		b.open(path, "[sse-connect]")
		b.waitJS("its live stream is open", 30*time.Second, streamsJS(1, false))
		if i < len(pages)-1 {
			b.setHidden(true)
			b.waitJS("hidden, its live stream is closed", 10*time.Second, streamsJS(2, true))
		}
		tabs = append(tabs, b)
	}

	// A change while the first tab is hidden shows when it is visible again.
	back := tabs[0]
	back.markNoReload()
	code, body := p.do(http.MethodPost, "/api/v1/tenants", `{"apiVersion":"rezuscloud.io/v1","kind":"Tenant","metadata":{"name":"while-hidden"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	// The visible eighth tab shows it live at once.
	tabs[7].waitJS("the visible tab shows the new tenant live", 30*time.Second,
		`(() => { const r = document.querySelector('#tenant-rows tr[data-tenant="while-hidden"]'); return {ok: !!r, state: r ? 'there' : 'not yet'}; })()`)
	back.waitJS("the hidden tab has not got it", 5*time.Second,
		`(() => { const r = document.querySelector('#tenant-rows tr[data-tenant="while-hidden"]'); return {ok: !r, state: r ? 'there' : 'not there'}; })()`)
	back.setHidden(false)
	back.waitJS("shown again, its stream reopens with ?seen= digests", 30*time.Second,
		`(() => { const s = window.rezusLive.streams();
		  const ok = s.length === 1 && s[0].state === 1 && !s[0].resting && /[?&]seen=tenants%3A[0-9a-z]+/.test(s[0].url);
		  return {ok, state: JSON.stringify(s)}; })()`)
	back.waitJS("the tenant created while hidden is there", 30*time.Second,
		`(() => { const r = document.querySelector('#tenant-rows tr[data-tenant="while-hidden"]'); return {ok: !!r, state: r ? 'there' : 'not yet'}; })()`)
	back.expectNoReload()
}
