package webui

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"html"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// machineRoutes serves a machine's page.
func (u *UI) machineRoutes(p *pages) {
	p.GET("/tenants/:tenant/machines/:name", u.machinePage)
	p.GET("/live/tenants/:tenant/machines/:name", u.machineLive)
	p.GET("/tenants/:tenant/machines/:name/config", u.machineConfig)
	p.GET("/tenants/:tenant/machines/:name/logs", u.machineLogPanel)
	p.GET("/live/tenants/:tenant/machines/:name/logs", u.machineLogLive)
}

// kernelLog is the log source that stands for the kernel messages (dmesg)
// rather than a service's log.
const kernelLog = "kernel"

// logSources are the logs the page offers: Talos' system services, then the
// kernel's messages.
var logSources = []string{"machined", "apid", "trustd", "containerd", "cri", "kubelet", "etcd", "udevd", "syslogd", kernelLog}

// logTail is how many lines of a log the page starts with.
const logTail = "500"

// logSource is the ?service= of a request, one the page offers (machined by default).
func logSource(c echo.Context) string {
	if s := c.QueryParam("service"); slices.Contains(logSources, s) {
		return s
	}
	return logSources[0]
}

func machinePath(tenant, name string) string { return "/tenants/" + tenant + "/machines/" + name }

func (u *UI) machineDetailsFragment(c echo.Context) (templ.Component, error) {
	t, name := c.Param("tenant"), c.Param("name")
	m, err := getOf[domain.Machine](u, c.Request(), machinePath(t, name))
	if domain.ReasonOf(err) == domain.ReasonNotFound {
		return nil, &liveEnd{Message: goneMessage("Machine " + name + " of tenant " + t)}
	}
	if err != nil {
		return nil, err
	}
	return machineDetails(*m, u.configHistory(c.Request(), t, name)), nil
}

func (u *UI) machinePage(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	m, err := getOf[domain.Machine](u, c.Request(), machinePath(t, name))
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, MachinePage(u, viewerOf(c), *m, u.configHistory(c.Request(), t, name), logSource(c)))
}

func (u *UI) machineLive(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	return u.liveIn(c, t, []string{domain.SubjectFilter(domain.MachineKind, t, name)},
		fragment{Event: "machine", Render: u.machineDetailsFragment})
}

// machineConfig is the rendered config, for roles that may read it (it carries
// the tenant's keys; the API refuses the others).
func (u *UI) machineConfig(c echo.Context) error {
	var raw []byte
	if err := u.api.call(c.Request(), apiRequest{Path: machinePath(c.Param("tenant"), c.Param("name")) + "/config"}, &raw); err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, machineConfigBlock(string(raw)))
}

// machineLogPanel is the log panel for another source: swapping it in
// connects its stream anew.
func (u *UI) machineLogPanel(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, Prefix+machinePath(t, name)+query("service", c.QueryParam("service"))+"#logs")
	}
	if _, err := getOf[domain.Machine](u, c.Request(), machinePath(t, name)); err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, machineLogPanel(t, name, logSource(c)))
}

// machineLogLive streams a followed log as "log" events of HTML-escaped
// lines, appended to the page's <pre>. The stream holds its follow's slot of
// the watch limits (the API's follow takes it) for as long as it is open:
// beyond the user's limit it answers 429 with Retry-After, as every other
// live stream does. A follow that is refused (by the API or the node) or
// ends ends the stream with a last "ended" event saying why, so nothing
// stays open without a slot and the browser does not reconnect over and
// over (issue 42: 1,500 refused streams of one user stayed open).
func (u *UI) machineLogLive(c echo.Context) error {
	t, name, src := c.Param("tenant"), c.Param("name"), logSource(c)
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	stop := context.AfterFunc(u.stopping, cancel)
	defer stop()

	path := machinePath(t, name) + "/logs" + query("service", src, "follow", "true", "tail", logTail)
	if src == kernelLog {
		path = machinePath(t, name) + "/dmesg" + query("follow", "true")
	}
	body, err := u.api.stream(ctx, c.Request(), apiRequest{Path: path})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if domain.ReasonOf(err) == domain.ReasonTooManyRequests {
			return u.fail(c, err) // 429 with Retry-After: the browser tries again later
		}
		// The session, or the machine (or access to it), is gone, or the
		// log cannot be read: the stream ends for good.
		end := u.machineLogEnd(c, t, name)
		if end == nil {
			end = &liveEnd{Message: "Cannot read the log: " + errorMessage(err) + ". Live updates have stopped."}
		}
		return u.endLiveNow(c, end)
	}
	defer body.Close()

	w := c.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	w.Flush()
	send := func(lines ...string) bool {
		var out bytes.Buffer
		logEvent(&out, lines)
		if _, err := w.Write(out.Bytes()); err != nil {
			return false
		}
		w.Flush()
		return true
	}

	lines := make(chan string, 256)
	var ended error
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		ended = sc.Err()
	}()

	heartbeat := time.NewTicker(u.cfg.Heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return nil
			}
			w.Flush()
		case l, ok := <-lines:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				// The follow ended (the node went or rebooted, the API
				// ended it because the caller's access went): its slot is
				// free, and the stream ends too, saying why.
				end := u.machineLogEnd(c, t, name)
				if end == nil {
					msg := "The log ended"
					if ended != nil {
						msg += ": " + ended.Error()
					}
					end = &liveEnd{Message: msg + ". Live updates have stopped."}
				}
				var out bytes.Buffer
				writeLiveEnd(ctx, &out, end)
				_, _ = w.Write(out.Bytes())
				w.Flush()
				return nil
			}
			// Gather the lines already there into one event.
			batch := []string{logLine(l)}
		more:
			for len(batch) < 1000 {
				select {
				case l, ok := <-lines:
					if !ok {
						// Seen again on the next turn of the loop (a closed channel stays ready).
						break more
					}
					batch = append(batch, logLine(l))
				default:
					break more
				}
			}
			if !send(batch...) {
				return nil
			}
		}
	}
}

// machineLogEnd says why a machine's followed log ended for good, if it did:
// the session is gone, or the machine (deleted, or out of the user's view).
func (u *UI) machineLogEnd(c echo.Context, tenant, name string) *liveEnd {
	err := u.api.call(c.Request(), apiRequest{Path: machinePath(tenant, name)}, nil)
	switch domain.ReasonOf(err) {
	case domain.ReasonUnauthorized:
		return &liveEnd{Message: sessionEnded, SignIn: true}
	case domain.ReasonNotFound:
		return &liveEnd{Message: goneMessage("Machine " + name + " of tenant " + tenant)}
	}
	return nil
}

// logEvent frames lines (already HTML) as one "log" event whose data keeps
// every line's newline: each line is a data field, and a last empty one ends
// the text with a newline too, so the next event starts on a line of its own.
func logEvent(out *bytes.Buffer, lines []string) {
	out.WriteString("event: log\n")
	for _, l := range lines {
		out.WriteString("data: " + l + "\n")
	}
	out.WriteString("data: \n\n")
}

// logLine is a log line as HTML: escaped, without the carriage returns that
// would end an SSE field.
func logLine(l string) string { return html.EscapeString(strings.ReplaceAll(l, "\r", "")) }

// boolStatus shows a flag as a condition status.
func boolStatus(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// logSourceLabel names a log source in the selector.
func logSourceLabel(s string) string {
	if s == kernelLog {
		return "kernel (dmesg)"
	}
	return s
}
