package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Replay limits of /api/v1/events and /api/v1/audit.
const (
	DefaultReplayLimit = 500
	MaxReplayLimit     = 10000
)

// SSE event names of follows.
const (
	sseEvent = "EVENT"
	sseAudit = "AUDIT"
)

// eventItem is one resource event as /api/v1/events serves it.
type eventItem struct {
	Seq           uint64        `json:"seq"`
	Subject       string        `json:"subject"`
	Type          string        `json:"type"`
	Action        domain.Action `json:"action"`
	Actor         string        `json:"actor,omitempty"`
	Time          time.Time     `json:"time"`
	CorrelationID string        `json:"correlationId,omitempty"`
	// Object is the event's post-image with resourceVersion set to Seq.
	Object *domain.Object `json:"object"`
}

func eventItemOf(rec *eventstore.Record) eventItem {
	obj := rec.Event.Object // decoded for this read alone
	obj.Metadata.ResourceVersion = strconv.FormatUint(rec.Seq, 10)
	return eventItem{Seq: rec.Seq, Subject: rec.Subject, Type: rec.Event.Type, Action: rec.Event.Action,
		Actor: rec.Event.Actor, Time: rec.Event.Time, CorrelationID: rec.Event.CorrelationID, Object: obj}
}

// replayMeta is the metadata of a replay answer. Continue, when set, is the
// sequence of the last item: pass it as continue= (with the same filters) for
// the next page. An answer to newest= never sets it: the older page is
// until=<the first item's seq - 1> with the same newest and filters.
type replayMeta struct {
	Continue string `json:"continue,omitempty"`
}

type eventList struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   replayMeta  `json:"metadata"`
	Items      []eventItem `json:"items"`
}

// events serves GET /api/v1/events: the resource event stream in order,
// filtered by kind, tenant and name (all three: one object's whole history),
// from a sequence or a time; follow=true keeps streaming new events as SSE;
// newest=N answers the newest N events of the window instead of the oldest.
func (a *API) events(c echo.Context) error {
	q := c.QueryParams()
	rq, causes := parseReplayQuery(c)
	var kind *domain.KindInfo
	if v := q.Get("kind"); v != "" {
		k, ok := domain.LookupKind(v)
		if !ok {
			causes = append(causes, domain.Cause{Field: "kind", Type: domain.CauseNotSupported, Message: fmt.Sprintf("%q is not a kind", v)})
		}
		kind = k
	}
	tenant, name := q.Get("tenant"), q.Get("name")
	causes = append(causes, nameCause("tenant", tenant)...)
	causes = append(causes, nameCause("name", name)...)
	var subjects []string
	if len(causes) == 0 {
		var cause *domain.Cause
		subjects, cause = eventSubjects(kind, tenant, name)
		if cause != nil {
			causes = append(causes, *cause)
		}
	}
	if len(causes) > 0 {
		return domain.NewBadRequest("bad event query: "+causeSummary(causes), causes...)
	}

	g := a.newStreamGuard(c)
	visible := a.eventVisibility(g)
	if rq.follow {
		return a.follow(c, g, sseEvent, "events", func(ctx context.Context) (sseSource, error) {
			if err := a.checkNotPurged(ctx, rq.window.From); err != nil {
				return nil, err
			}
			cur, err := a.store.FollowFrom(ctx, rq.window.From, subjects)
			if err != nil {
				return nil, err
			}
			return eventSource{cur: cur, visible: visible}, nil
		})
	}
	ctx := c.Request().Context()
	if err := a.checkNotPurged(ctx, rq.window.From); err != nil {
		return err
	}
	recs, more, err := a.store.Replay(ctx, eventstore.ReplayOptions{Window: rq.window, Subjects: subjects, Limit: rq.limit, Newest: rq.newest})
	if err != nil {
		return err
	}
	out := eventList{APIVersion: domain.APIVersion, Kind: "EventList", Items: make([]eventItem, 0, len(recs))}
	for _, rec := range recs {
		if visible(rec) {
			out.Items = append(out.Items, eventItemOf(rec))
		}
	}
	if more {
		out.Metadata.Continue = strconv.FormatUint(recs[len(recs)-1].Seq, 10)
	}
	return c.JSON(http.StatusOK, out)
}

// checkNotPurged refuses to resume after a sequence the stream no longer
// holds the next of: the client would miss events without knowing (410, as
// for watches).
func (a *API) checkNotPurged(ctx context.Context, from eventstore.Position) error {
	if from.After == 0 || !from.Time.IsZero() {
		return nil
	}
	first, _, err := a.store.Bounds(ctx)
	if err != nil {
		return err
	}
	if first > 0 && from.After+1 < first {
		return domain.NewGone(fmt.Sprintf("too old sequence: %d (the oldest available is %d)", from.After, first-1))
	}
	return nil
}

// eventSubjects turns the kind, tenant and name filters into subject filters.
// Without a kind, a tenant selects everything in it and the tenant itself.
func eventSubjects(kind *domain.KindInfo, tenant, name string) ([]string, *domain.Cause) {
	switch {
	case kind == nil && tenant == "" && name == "":
		return nil, nil
	case kind == nil && tenant == "":
		return []string{domain.SubjectPrefix + ".*.*." + name}, nil
	case kind == nil && name != "":
		return []string{domain.SubjectPrefix + ".*." + tenant + "." + name}, nil
	case kind == nil:
		return []string{domain.SubjectPrefix + ".*." + tenant + ".*",
			domain.SubjectFilter(domain.TenantKind, "", tenant)}, nil
	case kind == domain.TenantKind:
		if tenant != "" && name != "" && tenant != name {
			return nil, &domain.Cause{Field: "name", Type: domain.CauseInvalid, Message: "a tenant's events are under its own name; give tenant or name, or the same for both"}
		}
		if name == "" {
			name = tenant
		}
		return []string{domain.SubjectFilter(kind, "", name)}, nil
	case !kind.TenantScoped && tenant != "":
		return nil, &domain.Cause{Field: "tenant", Type: domain.CauseInvalid, Message: kind.Kind + " is cluster-scoped: it has no tenant"}
	}
	return []string{domain.SubjectFilter(kind, tenant, name)}, nil
}

// eventSource follows resource events for an SSE stream, skipping those
// the caller may not see.
type eventSource struct {
	cur     *eventstore.Cursor
	visible func(*eventstore.Record) bool
}

func (s eventSource) Next(ctx context.Context) (uint64, []byte, error) {
	for {
		rec, err := s.cur.Next(ctx)
		if err != nil {
			return 0, nil, err
		}
		if !s.visible(rec) {
			continue
		}
		b, err := json.Marshal(eventItemOf(rec))
		return rec.Seq, b, err
	}
}

func (s eventSource) Stop() { s.cur.Stop() }

// replayQuery is what the events and audit endpoints share: where to start,
// where to end, how many items, and whether to keep following.
type replayQuery struct {
	window eventstore.Window
	limit  int
	// newest, when positive, asks for the newest newest items of the window
	// (still oldest first) instead of the oldest limit.
	newest int
	follow bool
}

// parseReplayQuery reads since, until, continue, limit, newest and follow
// (and, for a follow, the Last-Event-ID header EventSource sends on
// reconnect). since and until take a stream sequence or an RFC 3339 time;
// since=N starts after N, until=N ends with N. newest=N (1..MaxReplayLimit)
// asks for the newest N items of the window; it pages backwards with until,
// so it goes with neither follow, continue nor limit. It returns a cause for
// every bad parameter.
func parseReplayQuery(c echo.Context) (replayQuery, []domain.Cause) {
	q := c.QueryParams()
	rq := replayQuery{limit: DefaultReplayLimit}
	var causes []domain.Cause
	bad := func(field, msg string) {
		causes = append(causes, domain.Cause{Field: field, Type: domain.CauseInvalid, Message: msg})
	}
	switch v := q.Get("follow"); v {
	case "", "false", "0":
	case "true", "1":
		rq.follow = true
	default:
		bad("follow", fmt.Sprintf("%q is not true or false", v))
	}
	if v := q.Get("since"); v != "" {
		seq, t, ok := parseSeqOrTime(v)
		if !ok {
			bad("since", fmt.Sprintf("%q is neither a sequence nor an RFC 3339 time", v))
		}
		rq.window.From = eventstore.Position{After: seq, Time: t}
	}
	resume := func(field, v string) {
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			bad(field, fmt.Sprintf("%q is not a sequence this server issued", v))
			return
		}
		rq.window.From = eventstore.Position{After: seq}
	}
	if v := q.Get("continue"); v != "" {
		resume("continue", v)
	}
	if v := c.Request().Header.Get("Last-Event-ID"); v != "" && rq.follow {
		resume("Last-Event-ID", v)
	}
	if v := q.Get("until"); v != "" {
		seq, t, ok := parseSeqOrTime(v)
		switch {
		case !ok:
			bad("until", fmt.Sprintf("%q is neither a sequence nor an RFC 3339 time", v))
		case rq.follow:
			bad("until", "a follow has no end; leave out until or follow")
		case seq == 0 && t.IsZero():
			bad("until", "0 ends before the first sequence")
		}
		rq.window.UntilSeq, rq.window.Until = seq, t
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil || n < 0 || n > MaxReplayLimit:
			bad("limit", fmt.Sprintf("%q is not a number from 0 to %d", v, MaxReplayLimit))
		case n > 0:
			rq.limit = n
		}
	}
	if v := q.Get("newest"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil || n < 1 || n > MaxReplayLimit:
			bad("newest", fmt.Sprintf("%q is not a number from 1 to %d", v, MaxReplayLimit))
		case rq.follow:
			bad("newest", "a follow streams new items, it has no newest ones; leave out newest or follow")
		case q.Get("continue") != "":
			bad("newest", "older items than the newest are read with until=<the first seq returned - 1>, not continue")
		case q.Get("limit") != "":
			bad("newest", "newest says how many items to answer; leave out limit")
		default:
			rq.newest = n
		}
	}
	return rq, causes
}

// parseSeqOrTime reads a stream sequence or an RFC 3339 time.
func parseSeqOrTime(v string) (uint64, time.Time, bool) {
	if seq, err := strconv.ParseUint(v, 10, 64); err == nil {
		return seq, time.Time{}, true
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return 0, t, true
	}
	return 0, time.Time{}, false
}

// nameCause checks a name given as a query parameter (it becomes a subject token).
func nameCause(field, v string) []domain.Cause {
	if v == "" {
		return nil
	}
	return domain.ValidateName(v, field)
}

// sseSource is what a follow streams: frames with a sequence (the SSE id)
// and a JSON object, until Next fails or its ctx ends.
type sseSource interface {
	Next(ctx context.Context) (seq uint64, object []byte, err error)
	Stop()
}

// follow streams a source as Server-Sent Events in the framing of watches
// ("id: <seq>", "event: <typ>", "data: {type, object}"), with heartbeats. It
// counts against MaxWatches and MaxWatchesPerUser (429 beyond them, before
// the stream starts) and ends when the client leaves, the server stops
// (StopWatches) or the source fails (an ERROR event with a Status). An error
// from open, such as a purged sequence, is sent as an ERROR event too.
//
// g re-checks the caller's access every AccessRecheckInterval; when access
// is gone the stream ends with an ERROR event carrying the Status.
func (a *API) follow(c echo.Context, g *streamGuard, typ, what string, open func(context.Context) (sseSource, error)) error {
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	stop := context.AfterFunc(a.stopping, cancel)
	defer stop()
	release, err := a.acquireStream(c)
	if err != nil {
		return err
	}
	defer release()
	src, openErr := open(ctx)

	write, end := a.startSSE(c)
	defer end()
	if openErr != nil {
		_ = write(sseFrame(projections.WatchError, 0, statusObject(openErr)))
		return nil
	}
	defer src.Stop()
	if err := write([]byte(": following " + what + "\n\n")); err != nil {
		return nil
	}

	type frame struct {
		seq  uint64
		data []byte
	}
	frames := make(chan frame)
	done := make(chan struct{})
	var srcErr error
	go func() {
		defer close(done)
		for {
			seq, data, err := src.Next(ctx)
			if err != nil {
				srcErr = err
				return
			}
			select {
			case frames <- frame{seq, data}:
			case <-ctx.Done():
				return
			}
		}
	}()
	// Runs before src.Stop: the reader must be gone before its source stops.
	defer func() {
		cancel()
		<-done
	}()

	heartbeat := time.NewTicker(a.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	recheck := g.ticker()
	defer recheck.Stop()
	for {
		select {
		case <-recheck.C:
			if err := g.recheck(); err != nil {
				_ = write(sseFrame(projections.WatchError, 0, statusObject(err)))
				return nil
			}
		case f := <-frames:
			if err := write(sseFrame(typ, f.seq, f.data)); err != nil {
				return nil
			}
		case <-done:
			if ctx.Err() == nil && srcErr != nil {
				a.log.Warn("follow ended", "what", what, "err", srcErr)
				_ = write(sseFrame(projections.WatchError, 0, statusObject(srcErr)))
			}
			return nil
		case <-heartbeat.C:
			if err := write([]byte(": heartbeat\n\n")); err != nil {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}
