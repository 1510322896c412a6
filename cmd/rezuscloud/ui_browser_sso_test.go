//go:build browser

package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/oidctest"
)

// TestBrowserSingleSignOn signs in to the web UI through a real OpenID
// provider (zitadel/oidc's, with its own login page) in headless Chromium:
// the sign-in page offers single sign-on, the provider's page takes the
// password, and the user comes back signed in, created with role none and
// seeing only the tenants its group "platform" is bound to. Removed from
// the group at the provider, the next session refresh (every 2 s here)
// drops it: the open live page of the tenant ends, as it does when any
// access goes.
func TestBrowserSingleSignOn(t *testing.T) {
	chromium := findChromium(t)
	op := oidctest.Start(t)
	op.AddUser("u-erin", "erin", "erin-secret-pw", "platform")
	secret := filepath.Join(t.TempDir(), "client-secret")
	require.NoError(t, os.WriteFile(secret, []byte(op.ClientSecret), 0o600))
	p := startServer(t, t.TempDir(), "--oidc-issuer", op.Issuer, "--oidc-client-id", op.ClientID,
		"--oidc-client-secret-file", secret, "--oidc-refresh-interval", "2s")
	op.AllowRedirect(p.url + "/api/v1/auth/sso/callback")
	mustAPI(t, p, "POST", "/api/v1/tenants", `{"metadata":{"name":"plat","labels":{"team":"platform"}},"spec":{}}`)
	mustAPI(t, p, "POST", "/api/v1/tenants", `{"metadata":{"name":"other"},"spec":{}}`)
	mustAPI(t, p, "POST", "/api/v1/groupbindings", `{"metadata":{"name":"platform-viewers"},
		"spec":{"groups":["platform"],"bindings":[{"role":"view","tenantSelector":"team=platform"}]}}`)

	erin := newBrowserUser(t, startBrowser(t, chromium), p.url, "erin", "")
	t.Cleanup(erin.close)
	b := erin.on(t)
	b.open("/ui/login?next=/ui/tenants", "[data-testid=sso-login]")
	b.clickAndLoad("[data-testid=sso-login]")
	b.waitJS("the provider's login page", 20*time.Second,
		`({ok: !!document.querySelector('input#username') && location.href.startsWith('`+op.Issuer+`'), state: location.href})`)
	b.run("typing at the provider", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("input#username"), "erin"),
		chromedp.SendKeys(chromedp.CSS("input#password"), "erin-secret-pw"))
	b.clickAndLoad("button[type=submit]")
	b.waitJS("back in the web UI, signed in as erin", 30*time.Second,
		`(() => { const n = document.querySelector('[data-testid=user-name]');
		  return {ok: location.pathname === '/ui/tenants' && !!n && n.textContent.trim() === 'erin', state: location.href + ' ' + (n ? n.textContent : '')}; })()`)
	b.expectText("[data-testid=user-role]", "none")
	b.waitJS("only the platform tenant is listed", 20*time.Second,
		`(() => { const plat = !!document.querySelector('a[href="/ui/tenants/plat"]'); const other = !!document.querySelector('a[href="/ui/tenants/other"]');
		  return {ok: plat && !other, state: 'plat=' + plat + ' other=' + other}; })()`)

	b.open("/ui/tenants/plat", "[data-testid=user-name]")
	op.SetGroups("u-erin")
	b.waitJS("the live page ends once the refresh drops the group", 60*time.Second,
		`(() => { const e = document.querySelector('[data-testid=live-ended]'); return {ok: !!e, state: e ? e.textContent.trim() : 'live'}; })()`)
	b.openPage("/ui/tenants")
	b.waitJS("no tenant is listed any more", 20*time.Second,
		`(() => { const plat = !!document.querySelector('a[href="/ui/tenants/plat"]'); return {ok: !plat, state: 'plat=' + plat}; })()`)
}
