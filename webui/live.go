package webui

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// fragment is one live part of a page: an SSE event name (the element's
// sse-swap) and how to render it now.
type fragment struct {
	Event  string
	Render func(c echo.Context) (templ.Component, error)
}

// liveEndEvent is the last event of a live stream that ends for good: the
// session ended, or the page's object is gone or no longer visible to the
// user. Every element with sse-connect closes its stream on it (sse-close),
// so the browser does not reconnect over and over, and shows its message in
// the element's liveEndSlot.
const liveEndEvent = "ended"

// sessionEnded is the message of a live stream whose session is gone.
const sessionEnded = "Your session has ended (you signed out, your password was changed, or your user was disabled or deleted): live updates have stopped."

// liveEnd, returned by a fragment's Render (with or without a component),
// ends the live stream once this round is sent, with Message for the page.
type liveEnd struct {
	Message string
	// SignIn offers to sign in again rather than to reload.
	SignIn bool
}

func (e *liveEnd) Error() string { return e.Message }

// asLiveEnd reports whether err ends the live stream.
func asLiveEnd(err error) (*liveEnd, bool) {
	var e *liveEnd
	ok := errors.As(err, &e)
	return e, ok
}

// goneMessage is what a live page says when its object went away: deleted,
// or out of the user's view (the API answers both alike, 404).
func goneMessage(what string) string {
	return what + " is gone: it was deleted, or you may no longer see it. Live updates have stopped."
}

// isLive reports whether the request is a live stream's (an EventSource).
func isLive(c echo.Context) bool {
	r := c.Request()
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, Prefix+"/live/")
}

// writeLiveEnd frames the end event.
func writeLiveEnd(ctx context.Context, out *bytes.Buffer, e *liveEnd) {
	writeEvent(out, liveEndEvent, componentHTML(ctx, liveEnded(*e)))
}

// endLiveNow answers a live stream that cannot start (no session any more)
// with its end event alone, so the page says so and stops reconnecting.
func (u *UI) endLiveNow(c echo.Context, e *liveEnd) error {
	w := c.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var out bytes.Buffer
	writeLiveEnd(c.Request().Context(), &out, e)
	_, _ = w.Write(out.Bytes())
	w.Flush()
	return nil
}

// live streams a page's fragments as Server-Sent Events for htmx's SSE
// extension: all of them at once on connect (so nothing that changed between
// the page load and the connect is missed), then those whose rendering
// changed whenever the event stream shows a change on one of subjects (a
// burst is gathered into one re-render), and every LiveRefresh. The stream ends with the client, the
// server, or for good (liveEndEvent) with the session or the page's object.
func (u *UI) live(c echo.Context, subjects []string, frags ...fragment) error {
	return u.liveIn(c, "", subjects, frags...)
}

// liveIn is live for a page of one tenant: the stream also ends for good when
// the user's role on the tenant changes (the page's controls were rendered
// for the old one).
func (u *UI) liveIn(c echo.Context, tenant string, subjects []string, frags ...fragment) error {
	// A live stream holds a consumer of the event stream as an API watch
	// does, and counts with them: 1,500 streams of one view user were all
	// answered, the server's memory growing with them (issue 27).
	if u.streams != nil {
		v := viewerOf(c)
		release, err := u.streams.AcquireStream(v.uid, v.Name)
		if err != nil {
			return u.fail(c, err)
		}
		defer release()
	}
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	stop := context.AfterFunc(u.stopping, cancel)
	defer stop()

	changes, stopFollowing, err := u.cache.Changes(ctx, withUser(subjects, viewerOf(c).Name))
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
	startRole := ""
	if tenant != "" {
		startRole = viewerOf(c).TenantRole(tenant)
	}
	send := func() bool {
		var out bytes.Buffer
		end := u.refreshViewer(c)
		if end == nil && tenant != "" {
			if role := viewerOf(c).TenantRole(tenant); role != startRole {
				end = &liveEnd{Message: "Your role on tenant " + tenant + " changed (now " + role + "): reload the page to see what you may do. Live updates have stopped."}
				if domain.RoleRank(role) == 0 {
					end = &liveEnd{Message: goneMessage("Tenant " + tenant)}
				}
			}
		}
		type rendered struct {
			event string
			comp  templ.Component
			err   error
		}
		var parts []rendered
		if end == nil || !end.SignIn {
			for _, f := range frags {
				comp, err := f.Render(c)
				if e, ok := asLiveEnd(err); ok {
					if end == nil {
						end = e
					}
					err = nil
				} else if domain.ReasonOf(err) == domain.ReasonUnauthorized {
					end = &liveEnd{Message: sessionEnded, SignIn: true}
				}
				parts = append(parts, rendered{f.Event, comp, err})
			}
		}
		for _, p := range parts {
			comp := p.comp
			if p.err != nil {
				if end != nil {
					continue // the page is going; no error for each part
				}
				comp = Flash("error", errorMessage(p.err))
			}
			if comp == nil {
				continue
			}
			var html bytes.Buffer
			if err := comp.Render(ctx, &html); err != nil {
				return false
			}
			digest := fragmentDigest(html.Bytes())
			if sent[p.event] == digest {
				continue
			}
			sent[p.event] = digest
			writeEvent(&out, p.event, html.String())
		}
		if end != nil {
			writeLiveEnd(ctx, &out, end)
		}
		if out.Len() > 0 {
			if _, err := w.Write(out.Bytes()); err != nil {
				return false
			}
			w.Flush()
		}
		return end == nil
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

// refreshViewer authenticates a live stream's request again, so each
// re-render shows the controls of the user's access as it is now; it answers
// the end of the stream when the session is gone.
func (u *UI) refreshViewer(c echo.Context) *liveEnd {
	id, err := u.identity.Authenticate(c.Request())
	if err != nil || id.AuthMethod != identity.AuthSession {
		return &liveEnd{Message: sessionEnded, SignIn: true}
	}
	v := viewerOf(c)
	v.Name, v.Role, v.access = id.Name, id.Role, id.Access()
	c.Set(viewerKey, v)
	return nil
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

// withUser adds the user's own subject to a live stream's, so a change of
// the user (bindings, role, disabled, deleted) is re-rendered, or ends the
// stream, at once; unless subjects already cover it (JetStream refuses
// overlapping filters).
func withUser(subjects []string, user string) []string {
	if user == "" || slices.Contains(subjects, domain.SubjectPrefix+".>") {
		return subjects
	}
	return append(slices.Clip(subjects), domain.SubjectFilter(domain.UserKind, "", user))
}

// fragmentDigest is a short digest of a rendered fragment: FNV-1a 64 in
// base 36 of the fragment as the browser receives it, an SSE event's data
// (its lines as writeEvent frames them, joined with "\n"). static/live.js
// computes the same digest of each event it receives, so a stream reopened
// after the tab was hidden names in ?seen= what the page shows now.
func fragmentDigest(html []byte) string {
	h := fnv.New64a()
	sc := bufio.NewScanner(bytes.NewReader(html))
	sc.Buffer(make([]byte, 0, 64*1024), len(html)+1)
	for first := true; sc.Scan(); first = false {
		if !first {
			h.Write([]byte{'\n'})
		}
		h.Write(sc.Bytes())
	}
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
		if _, ok := asLiveEnd(err); ok && comp != nil {
			err = nil // a page load shows the part (e.g. "gone") as it is
		}
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
