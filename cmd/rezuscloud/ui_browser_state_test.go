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

// TestBrowserStatePage follows a tenant's Terraform state in the UI: two
// applies on the emulator write versions, the tenant page links to its state
// page, which lists them, says the state is not locked (so no force-unlock),
// and compares the oldest and newest versions: the server's state is
// encrypted (TF_ENCRYPTION), and the page decrypts it with the tenant's key
// to show the worker the second apply added (names only, no values).
func TestBrowserStatePage(t *testing.T) {
	chromium := findChromium(t)
	dataDir := t.TempDir()
	p := startInfraServer(t, dataDir)
	adminPassword := strings.TrimSpace(string(waitFile(t, filepath.Join(dataDir, "initial-admin-password"))))

	const tenant = "st"
	code, body := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do(http.MethodPost, "/api/v1/tenants/"+tenant+"/nodegroups",
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	// versions waits for at least n kept versions and no lock (no apply running).
	versions := func(n int) {
		p.eventually(5*time.Minute, "the state has versions and no lock", func() bool {
			code, l := p.do(http.MethodGet, "/api/v1/tenants/"+tenant+"/state/versions", "")
			items, _ := l["items"].([]any)
			return code == http.StatusOK && len(items) >= n && l["lock"] == nil
		})
	}
	versions(1)
	code, body = p.do(http.MethodPost, "/api/v1/tenants/"+tenant+"/nodegroups",
		`{"metadata":{"name":"w"},"spec":{"role":"worker","count":1,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	versions(2)

	browserCtx := startBrowser(t, chromium)
	admin := newBrowserUser(t, browserCtx, p.url, "admin", "")
	defer admin.close()
	b := admin.on(t)
	b.open("/ui/login", "form[action='/ui/login']")
	b.signIn("admin", adminPassword)

	b.open("/ui/tenants/"+tenant, "[data-testid=tenant-state-link]")
	b.clickAndLoad("[data-testid=tenant-state-link]")
	b.waitPath("/ui/tenants/"+tenant+"/state", 30*time.Second)
	b.waitJS("the kept versions are listed, the state is not locked, no force-unlock", 10*time.Second,
		`(() => { const rows = document.querySelectorAll('[data-testid=state-versions] tbody tr');
		  const ok = rows.length >= 2 && !!document.querySelector('[data-testid=state-unlocked]') && !document.querySelector('[data-testid=state-force-unlock]');
		  return {ok, state: rows.length + ' versions, ' + document.querySelector('[data-testid=state-lock]').textContent.trim()}; })()`)
	b.waitJS("the oldest and newest versions are picked", 10*time.Second,
		`(() => { const f = document.querySelector('[data-testid=state-diff-from]'), t = document.querySelector('[data-testid=state-diff-to]');
		  const vals = Array.from(f.options).map(o => +o.value);
		  f.value = String(Math.min(...vals)); t.value = String(Math.max(...vals));
		  return {ok: f.value !== t.value, state: f.value + ' -> ' + t.value}; })()`)
	b.clickAndLoad("[data-testid=state-diff-submit]")
	b.waitJS("the comparison of two encrypted versions shows the added worker", 10*time.Second,
		`(() => { const d = document.querySelector('[data-testid=state-diff]');
		  const added = Array.from(document.querySelectorAll('[data-testid=state-diff-added]')).map(e => e.textContent);
		  const ok = !!d && !document.querySelector('[data-testid=state-diff-encrypted]') && /Revision \d+ \(serial \d+/.test(d.textContent) &&
		    added.some(a => a.includes('module.ng_w__emulated.emulated_machine.machine["w-0"]')) && !/BEGIN/.test(d.textContent);
		  return {ok, state: d ? d.textContent.replace(/\s+/g, ' ').trim().slice(0, 300) : 'no diff'}; })()`)
}
