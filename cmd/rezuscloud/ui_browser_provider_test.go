//go:build browser

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// browserModuleMain is a module file tofu validate refuses (an argument the
// emulated provider's schema lacks, line 15) though its HCL and the module
// contract are fine, so the server takes it.
const browserModuleMain = `terraform {
  required_providers {
    emulated = { source = "rezuscloud/emulated", version = "0.1.0" }
  }
}

provider "emulated" {
  endpoint = var.emulator
}

resource "emulated_machine" "machine" {
  for_each  = var.machines
  name      = each.value.hostname
  cluster   = var.tenant
  bogus_arg = "</td><script>window.__injected = 1</script>"
  user_data = each.value.config
}

output "machines" {
  value = { for k, m in emulated_machine.machine : k => { address = m.address, provider_id = m.provider_id } }
}
`

// TestBrowserModuleProvider opens a module provider's page: the server's
// module validator's verdict (tofu validate refuses line 15) links its
// diagnostic to that line; a change of the module brings the next verdict
// live, without a reload; the link targets the line, which the page marks,
// and the file's text stays text. With REZUS_SCREENSHOTS it saves the page
// as provider.png there.
func TestBrowserModuleProvider(t *testing.T) {
	chromium := findChromium(t)
	dataDir := t.TempDir()
	p := startInfraServer(t, dataDir)
	adminPassword := strings.TrimSpace(string(waitFile(t, filepath.Join(dataDir, "initial-admin-password"))))

	files, _ := json.Marshal(map[string]string{
		"main.tf":      browserModuleMain,
		"variables.tf": "variable \"tenant\" {\n  type = string\n}\n\nvariable \"machines\" {\n  type = map(object({ config = string, hostname = string }))\n}\n\nvariable \"emulator\" {\n  type = string\n}\n",
	})
	code, body := p.do(http.MethodPost, "/api/v1/providers",
		`{"metadata":{"name":"lab"},"spec":{"type":"module","config":{"emulator":"http://127.0.0.1:1"},"module":{"files":`+string(files)+`}}}`)
	require.Equal(t, http.StatusCreated, code, body)

	browserCtx := startBrowser(t, chromium)
	admin := newBrowserUser(t, browserCtx, p.url, "admin", os.Getenv("REZUS_SCREENSHOTS"))
	defer admin.close()
	b := admin.on(t)
	b.open("/ui/login", "form[action='/ui/login']")
	b.signIn("admin", adminPassword)

	b.open("/ui/settings/providers", `a[data-testid=provider-link][href="/ui/settings/providers/lab"]`)
	b.clickAndLoad(`a[data-testid=provider-link][href="/ui/settings/providers/lab"]`)
	b.waitPath("/ui/settings/providers/lab", 30*time.Second)
	b.open("/ui/settings/providers/lab", `#file-main\.tf-L15`)
	link := `[data-testid=diagnostics] a[href="#file-main.tf-L15"]`
	verdict := func(what string, generation int) {
		b.waitJS(what, 2*time.Minute, fmt.Sprintf(`(() => {
		  const v = document.querySelector('[data-testid=provider-validation]');
		  const state = v ? v.textContent.replace(/\s+/g, ' ').trim() : 'no validation';
		  const gen = [...document.querySelectorAll('[data-testid=provider-details] dt')].find(d => d.textContent.trim() === 'Generation');
		  const ok = !!document.querySelector(%s) && !document.querySelector('[data-testid=validated-stale]') &&
		    !!gen && gen.nextElementSibling.textContent.trim() === '%d';
		  return {ok, state: (gen ? 'generation ' + gen.nextElementSibling.textContent.trim() + ': ' : '') + state}; })()`, jsString(link), generation))
	}
	verdict("tofu validate's verdict on generation 1 links main.tf line 15", 1)

	// A new module: the page follows the next verdict live.
	b.markNoReload()
	main2, _ := json.Marshal(strings.Replace(browserModuleMain, "window.__injected = 1", "window.__injected = 2", 1))
	req, err := http.NewRequest(http.MethodPatch, p.url+"/api/v1/providers/lab", strings.NewReader(`{"spec":{"module":{"files":{"main.tf":`+string(main2)+`}}}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := p.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	verdict("the verdict on generation 2 arrives live", 2)
	b.expectNoReload()
	b.waitJS("line 15 is marked", 10*time.Second,
		`(() => { const r = document.getElementById('file-main.tf-L15'); return {ok: !!r && r.hasAttribute('data-marked'), state: r ? r.className : 'no row'}; })()`)

	b.click(link)
	b.waitJS("the link targets line 15, which is highlighted", 10*time.Second,
		`(() => { const r = document.querySelector(':target');
		  const bg = r ? getComputedStyle(r).backgroundColor : '';
		  return {ok: location.hash === '#file-main.tf-L15' && !!r && r.id === 'file-main.tf-L15' && bg === 'rgb(254, 243, 199)',
		          state: location.hash + ' ' + (r ? r.id : 'no target') + ' ' + bg}; })()`)
	b.waitJS("the file's text is shown as text", 10*time.Second,
		`(() => { const r = document.getElementById('file-main.tf-L15');
		  const s = r ? r.querySelector('.code-text').textContent : '';
		  return {ok: s.includes('"</td><script>window.__injected = 2</script>"') && !window.__injected && !r.querySelector('script'), state: s}; })()`)
	b.screenshot("provider.png")
}
