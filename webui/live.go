package webui

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// fragment is one live part of a page: an SSE event name (the element's
// sse-swap) and how to render it now.
type fragment struct {
	Event  string
	Render func(c echo.Context) (templ.Component, error)
}

// live streams a page's fragments as Server-Sent Events for htmx's SSE
// extension: all of them at once on connect (so nothing that changed between
// the page load and the connect is missed), then those whose rendering
// changed whenever the event stream shows a change on one of subjects (a
// burst is gathered into one re-render), and every LiveRefresh. The stream ends with the client, the
// session (a re-render the API refuses) or the server.
func (u *UI) live(c echo.Context, subjects []string, frags ...fragment) error {
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	stop := context.AfterFunc(u.stopping, cancel)
	defer stop()

	changes, stopFollowing, err := u.cache.Changes(ctx, subjects)
	if err != nil {
		return u.fail(c, err)
	}
	defer stopFollowing()

	w := c.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The browser's EventSource opens on the headers; the first fragments may
	// be none (the page is current).
	w.Flush()

	// sent is a digest of what each event last carried, starting with what
	// the page itself was rendered with (?seen=): a fragment that renders the
	// same is not sent, so the page's DOM (a button being clicked, text being
	// selected) is only replaced when what it shows changed.
	sent := parseSeen(c.QueryParam("seen"))
	send := func() bool {
		var out bytes.Buffer
		for _, f := range frags {
			comp, err := f.Render(c)
			if err != nil {
				if domain.ReasonOf(err) == domain.ReasonUnauthorized {
					return false
				}
				comp = Flash("error", errorMessage(err))
			}
			var html bytes.Buffer
			if err := comp.Render(ctx, &html); err != nil {
				return false
			}
			digest := fragmentDigest(html.Bytes())
			if sent[f.Event] == digest {
				continue
			}
			sent[f.Event] = digest
			writeEvent(&out, f.Event, html.String())
		}
		if out.Len() == 0 {
			return true
		}
		if _, err := w.Write(out.Bytes()); err != nil {
			return false
		}
		w.Flush()
		return true
	}
	if !send() {
		return nil
	}
	heartbeat := time.NewTicker(u.cfg.Heartbeat)
	defer heartbeat.Stop()
	refresh := time.NewTicker(u.cfg.LiveRefresh)
	defer refresh.Stop()
	var debounce <-chan time.Time
	var upTo uint64
	for {
		select {
		case <-ctx.Done():
			return nil
		case seq := <-changes:
			upTo = max(upTo, seq)
			if debounce == nil {
				debounce = time.After(u.cfg.LiveDebounce)
			}
		case <-debounce:
			debounce = nil
			u.waitShown(ctx, upTo)
			if !send() {
				return nil
			}
		case <-refresh.C:
			if !send() {
				return nil
			}
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return nil
			}
			w.Flush()
		}
	}
}

// writeEvent frames one SSE event; each line of data gets its own data field.
func writeEvent(out *bytes.Buffer, event, data string) {
	fmt.Fprintf(out, "event: %s\n", event)
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	for sc.Scan() {
		fmt.Fprintf(out, "data: %s\n", sc.Text())
	}
	if data == "" {
		out.WriteString("data: \n")
	}
	out.WriteString("\n")
}

// tenantSubjects are the event subjects of one tenant and everything in it.
func tenantSubjects(tenant string) []string {
	return []string{
		domain.SubjectFilter(domain.TenantKind, "", tenant),
		domain.SubjectPrefix + ".*." + tenant + ".>",
	}
}

// allSubjects is every resource event.
func allSubjects() []string { return []string{domain.SubjectPrefix + ".>"} }

// fragmentDigest is a short digest of a rendered fragment.
func fragmentDigest(html []byte) string {
	h := fnv.New64a()
	h.Write(html)
	return strconv.FormatUint(h.Sum64(), 36)
}

// renderFragments renders a live page's fragments for its first load, and
// returns the seen= value its live stream is opened with, so the stream sends
// only the fragments that changed since.
func renderFragments(c echo.Context, frags []fragment) ([]templ.Component, string, error) {
	comps := make([]templ.Component, len(frags))
	seen := make([]string, 0, len(frags))
	for i, f := range frags {
		comp, err := f.Render(c)
		if err != nil {
			return nil, "", err
		}
		var html bytes.Buffer
		if err := comp.Render(c.Request().Context(), &html); err != nil {
			return nil, "", err
		}
		comps[i] = templ.Raw(html.String())
		seen = append(seen, f.Event+":"+fragmentDigest(html.Bytes()))
	}
	return comps, strings.Join(seen, ","), nil
}

// parseSeen reads renderFragments' seen= value; anything malformed is ignored
// (the fragments are then all sent).
func parseSeen(v string) map[string]string {
	out := map[string]string{}
	if len(v) > 4096 {
		return out
	}
	for _, part := range strings.Split(v, ",") {
		if event, digest, ok := strings.Cut(part, ":"); ok && event != "" && digest != "" {
			out[event] = digest
		}
	}
	return out
}

// waitShown waits, at most 5 s, until the read model includes seq, so a
// re-render after a change shows it.
func (u *UI) waitShown(ctx context.Context, seq uint64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = u.cache.WaitFor(ctx, seq)
}
