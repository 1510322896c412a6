//go:build browser

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

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
