//go:build browser

package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/chromedp/chromedp"
)

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
