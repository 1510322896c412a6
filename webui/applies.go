package webui

import (
	"bytes"
	"context"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// applyFinalGrace bounds how long an apply's live log waits, once the log has
// ended, for the apply's final phase: the worker records it just after it
// closes the log.
const applyFinalGrace = 30 * time.Second

// applyLogReset is the first "log" event of a stream: it empties the log
// element, so a reconnecting browser does not show the log twice.
const applyLogReset = `<span hx-swap-oob="innerHTML:#apply-log"></span>`

// applyRoutes serve an apply's page, its live log and its cancellation.
// Applies are otherwise read-only: the apply worker records them.
func (u *UI) applyRoutes(p *pages) {
	p.GET("/tenants/:tenant/applies/:name", u.applyPage)
	p.GET("/live/tenants/:tenant/applies/:name/log", u.applyLogLive)
	p.POST("/tenants/:tenant/applies/:name/cancel", u.cancelApply)
}

func applyPath(tenant, name string) string {
	return "/tenants/" + tenant + "/applies/" + url.PathEscape(name)
}

// applyRows is the live table of the tenant's newest applies.
func (u *UI) applyRows(c echo.Context, tenant string) (templ.Component, error) {
	as, err := u.recentApplies(c.Request(), tenant)
	if err != nil {
		return nil, err
	}
	return applyTable(as), nil
}

func (u *UI) applyPage(c echo.Context) error {
	ap, err := getOf[domain.Apply](u, c.Request(), applyPath(c.Param("tenant"), c.Param("name")))
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, ApplyPage(u, viewerOf(c), *ap))
}

// cancelApply asks the API to stop a running apply and answers its details.
func (u *UI) cancelApply(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: applyPath(t, name) + "/cancel"}, nil); err != nil {
		return u.fail(c, err)
	}
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+t+"/applies/"+name)
	}
	ap, err := getOf[domain.Apply](u, c.Request(), applyPath(t, name))
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, applyDetails(viewerOf(c), *ap))
}

// applyLogLive is the apply page's one live stream: "status" events carry the
// apply's details whenever it changes, "log" events the tofu log as it is
// written (HTML-escaped, to be appended), and "done" says the log has ended
// and the apply is over, after which the page closes the stream.
func (u *UI) applyLogLive(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	stop := context.AfterFunc(u.stopping, cancel)
	defer stop()

	// Follow the apply's events before reading it, so no change is missed.
	changes, stopFollow, err := u.cache.Changes(ctx, []string{domain.SubjectFilter(domain.ApplyKind, t, name)})
	if err != nil {
		return u.fail(c, err)
	}
	defer stopFollow()
	ap, err := getOf[domain.Apply](u, c.Request(), applyPath(t, name))
	if err != nil {
		return u.fail(c, err)
	}
	body, logErr := u.api.stream(ctx, c.Request(), apiRequest{Path: applyPath(t, name) + "/log?follow=true"})
	if domain.ReasonOf(logErr) == domain.ReasonUnauthorized {
		return u.fail(c, logErr)
	}
	chunks := make(chan string)
	if logErr == nil {
		defer body.Close()
		go readLogChunks(ctx, body, chunks)
	} else {
		close(chunks)
	}

	w := c.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	v := viewerOf(c)
	var out bytes.Buffer
	flush := func() bool {
		_, err := w.Write(out.Bytes())
		out.Reset()
		if err != nil {
			return false
		}
		w.Flush()
		return true
	}
	// status sends the apply's details; false ends the stream: for good, with
	// a message, when the session or the apply (or access to it) is gone.
	status := func() bool {
		cur, err := getOf[domain.Apply](u, c.Request(), applyPath(t, name))
		if err != nil {
			switch domain.ReasonOf(err) {
			case domain.ReasonUnauthorized:
				writeLiveEnd(ctx, &out, &liveEnd{Message: sessionEnded, SignIn: true})
				flush()
				return false
			case domain.ReasonNotFound:
				writeLiveEnd(ctx, &out, &liveEnd{Message: goneMessage("Apply " + name + " of tenant " + t)})
				flush()
				return false
			}
			writeEvent(&out, "status", componentHTML(ctx, Flash("error", errorMessage(err))))
			return true
		}
		ap = cur
		writeEvent(&out, "status", componentHTML(ctx, applyDetails(v, *ap)))
		return true
	}
	if !status() {
		return nil
	}
	reset := applyLogReset
	if logErr != nil {
		reset += html.EscapeString("[the log is not available: " + errorMessage(logErr) + "]\n")
	}
	writeLogEvent(&out, reset)
	if !flush() {
		return nil
	}

	heartbeat := time.NewTicker(u.cfg.Heartbeat)
	defer heartbeat.Stop()
	var debounce, grace <-chan time.Time
	var upTo uint64
	logEnded := false
	for {
		if logEnded && (ap.Status.Final() || grace == nil) {
			writeEvent(&out, "done", componentHTML(ctx, applyLogEnded(ap.Status.Phase)))
			writeEvent(&out, liveEndEvent, "") // the page closes the stream
			flush()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case chunk, ok := <-chunks:
			if !ok {
				logEnded, chunks = true, nil
				grace = time.After(applyFinalGrace)
				if !status() || !flush() {
					return nil
				}
				continue
			}
			writeLogEvent(&out, html.EscapeString(chunk))
			if !flush() {
				return nil
			}
		case seq := <-changes:
			upTo = max(upTo, seq)
			if debounce == nil {
				debounce = time.After(u.cfg.LiveDebounce)
			}
		case <-debounce:
			debounce = nil
			u.waitShown(ctx, upTo)
			if !status() || !flush() {
				return nil
			}
		case <-grace:
			grace = nil
		case <-heartbeat.C:
			if _, err := io.WriteString(w, ": heartbeat\n\n"); err != nil {
				return nil
			}
			w.Flush()
		}
	}
}

// writeLogEvent frames escaped log text as a "log" event. writeEvent sends
// each line as a data field, which loses a final line break; one more keeps it.
func writeLogEvent(out *bytes.Buffer, text string) {
	if strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	writeEvent(out, "log", text)
}

// readLogChunks sends the log in chunks of whole lines (a line longer than
// 64 KiB is cut), with carriage returns made line breaks: a lone CR would end
// an SSE data field. It closes out when the log ends.
func readLogChunks(ctx context.Context, r io.Reader, out chan<- string) {
	defer close(out)
	buf := make([]byte, 32<<10)
	var pending []byte
	for {
		n, err := r.Read(buf)
		pending = append(pending, buf[:n]...)
		cut := bytes.LastIndexByte(pending, '\n') + 1
		if err != nil || (cut == 0 && len(pending) >= 64<<10) {
			cut = len(pending)
		}
		if cut > 0 {
			chunk := strings.ReplaceAll(strings.ReplaceAll(string(pending[:cut]), "\r\n", "\n"), "\r", "\n")
			select {
			case out <- chunk:
			case <-ctx.Done():
				return
			}
			pending = append(pending[:0], pending[cut:]...)
		}
		if err != nil {
			return
		}
	}
}

// componentHTML renders a component for an SSE event.
func componentHTML(ctx context.Context, comp templ.Component) string {
	var b strings.Builder
	_ = comp.Render(ctx, &b)
	return b.String()
}

// applyActive reports whether an apply may still be canceled.
func applyActive(a domain.Apply) bool {
	switch a.Status.Phase {
	case domain.ApplyQueued, domain.ApplyPlanning, domain.ApplyApplying:
		return true
	}
	return false
}

// applyDuration is how long a run took, or has been going.
func applyDuration(a domain.Apply) string {
	st := a.Status
	switch {
	case st.StartTime == nil:
		return ""
	case st.EndTime != nil:
		return shortDuration(st.EndTime.Sub(*st.StartTime))
	case !st.Final():
		return shortDuration(time.Since(*st.StartTime)) + "…"
	}
	return ""
}

// errorFirstLine is a long message's first line, for a table cell.
func errorFirstLine(s string) string {
	s, _, cut := strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > 120 {
		s, cut = string(r[:120]), true
	}
	if cut {
		s += "…"
	}
	return s
}

func applyTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
