//go:build browser

package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

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
