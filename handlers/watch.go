package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// watch streams changes as Server-Sent Events: "event: <TYPE>", "id: <resourceVersion>"
// and "data: {type, object}". A client resumes with ?resourceVersion=N or the
// Last-Event-ID header and gets exactly the changes after N. A version older than
// the stream is an ERROR event carrying a 410 Status. Comments keep idle
// connections alive and BOOKMARKs carry the current version.
func (r *resource) watch(c echo.Context) error {
	a := r.api
	opts, err := r.listOptions(c)
	if err != nil {
		return err
	}
	wopts := projections.WatchOptions{Kind: r.kind, Tenant: opts.Tenant, Selector: opts.Selector}
	rv := c.QueryParam("resourceVersion")
	if id := c.Request().Header.Get("Last-Event-ID"); id != "" {
		rv = id
	}
	if rv != "" {
		n, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return domain.NewBadRequest("resourceVersion must be a version this server issued",
				domain.Cause{Field: "resourceVersion", Type: domain.CauseInvalid, Message: strconv.Quote(rv) + " is not a resourceVersion"})
		}
		wopts.ResourceVersion = n
	}
	var timeout time.Duration
	if ts := c.QueryParam("timeoutSeconds"); ts != "" {
		n, err := strconv.Atoi(ts)
		if err != nil || n < 0 {
			return domain.NewBadRequest("timeoutSeconds must be a non-negative integer",
				domain.Cause{Field: "timeoutSeconds", Type: domain.CauseInvalid, Message: strconv.Quote(ts) + " is not a non-negative integer"})
		}
		timeout = time.Duration(n) * time.Second
	}

	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	stop := context.AfterFunc(a.stopping, cancel)
	defer stop()

	release, err := a.acquireStream(c)
	if err != nil {
		return err
	}
	defer release()
	if err := a.readBarrier(ctx); err != nil {
		return err
	}
	w, werr := a.cache.Watch(ctx, wopts)
	// A stream that cannot be followed now (its leader is being elected)
	// is a 503 with Retry-After before the watch starts, which a client
	// retries, not an ERROR event of a watch that began.
	var de *domain.Error
	if errors.As(werr, &de) && de.Reason == domain.ReasonServiceUnavailable {
		return werr
	}
	if werr != nil && a.stopping.Err() != nil {
		// The replica began to stop (a lame duck's StopWatches) while the
		// watch was being set up, cutting that short: the client resumes
		// on another replica as after a BOOKMARK, not after a failure.
		return errStopping
	}

	write, end := a.startSSE(c)
	defer end()
	if werr != nil {
		_ = write(sseFrame(projections.WatchError, 0, statusObject(werr)))
		return nil
	}
	defer w.Stop()
	if err := write([]byte(": watching " + r.kind.Plural + "\n\n")); err != nil {
		return nil
	}

	last := wopts.ResourceVersion
	g := a.newStreamGuard(c)
	recheck := g.ticker()
	defer recheck.Stop()
	// Across tenants, a scoped caller sees the objects of the tenants it may
	// see now; a tenant that leaves its view is DELETED for a tenants watch.
	byTenant := opts.Tenant == "" && (r.kind == domain.TenantKind || r.kind.TenantScoped)
	shown := map[string]bool{}
	if byTenant && r.kind == domain.TenantKind && wopts.ResourceVersion > 0 {
		// Resuming: the client may hold the tenants visible now.
		if res, err := a.cache.List(domain.TenantKind.Kind, projections.ListOptions{}); err == nil {
			for _, k := range res.Keys {
				if t := tenantOfKey(domain.TenantKind, k); g.tenantVisible(t) {
					shown[t] = true
				}
			}
		}
	}
	heartbeat := time.NewTicker(a.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	bookmark := time.NewTicker(a.cfg.BookmarkInterval)
	defer bookmark.Stop()
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				if err := w.Err(); err != nil && ctx.Err() == nil {
					a.log.Warn("watch ended", "kind", r.kind.Kind, "err", err)
					if de, ok := errors.AsType[*domain.Error](err); ok && de.Reason == domain.ReasonServiceUnavailable {
						// The stream stopped answering for a while: the
						// client resumes from the version reached, as after
						// a lame duck's end, rather than failing.
						if last > 0 {
							_ = write(r.bookmark(last))
						}
						return nil
					}
					_ = write(sseFrame(projections.WatchError, last, statusObject(err)))
				}
				r.endResumable(write, last)
				return nil
			}
			if ev.Seq > last {
				last = ev.Seq
			}
			if !r.hooks.visible(c, ev.Object) {
				continue
			}
			typ := ev.Type
			if acc := g.access(); byTenant && (acc.Scoped() || domain.RoleRank(acc.Global()) == 0) {
				var ok bool
				if typ, ok = tenantWatchType(r.kind, ev, g, shown); !ok {
					continue
				}
			}
			if err := write(sseFrame(typ, ev.Seq, ev.Object)); err != nil {
				return nil
			}
		case <-recheck.C:
			if err := g.recheck(); err != nil {
				_ = write(sseFrame(projections.WatchError, last, statusObject(err)))
				return nil
			}
		case <-heartbeat.C:
			if err := write([]byte(": heartbeat\n\n")); err != nil {
				return nil
			}
		case <-bookmark.C:
			if err := write(r.bookmark(last)); err != nil {
				return nil
			}
		case <-ctx.Done():
			r.endResumable(write, last)
			return nil
		}
	}
}

// errStopping answers a request a stopping replica cut short.
var errStopping = &domain.Error{Reason: domain.ReasonServiceUnavailable, RetryAfterSeconds: 1,
	Message: "this replica is shutting down; retry (another replica answers)"}

// bookmark is a BOOKMARK event carrying the version the watch has reached.
func (r *resource) bookmark(last uint64) []byte {
	bm, _ := json.Marshal(map[string]any{"apiVersion": domain.APIVersion, "kind": r.kind.Kind,
		"metadata": map[string]string{"resourceVersion": strconv.FormatUint(last, 10)}})
	return sseFrame(projections.WatchBookmark, last, bm)
}

// endResumable sends a last BOOKMARK when the server is shutting down
// (StopWatches): its id is the version the watch has reached, events hidden
// from this caller included, so a client resuming from it (rezusctl and the
// browser's EventSource send it back as Last-Event-ID) on another replica
// misses nothing and gets nothing twice.
func (r *resource) endResumable(write func([]byte) error, last uint64) {
	if r.api.stopping.Err() != nil && last > 0 {
		_ = write(r.bookmark(last))
	}
}

func statusObject(err error) []byte {
	b, _ := json.Marshal(domain.StatusOf(err))
	return b
}

// sseFrame renders one event; the id lets EventSource resume with Last-Event-ID.
func sseFrame(typ string, seq uint64, object []byte) []byte {
	b := make([]byte, 0, len(object)+64)
	if seq > 0 {
		b = append(b, "id: "...)
		b = strconv.AppendUint(b, seq, 10)
		b = append(b, '\n')
	}
	b = append(b, "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, "\",\"object\":"...)
	b = append(b, object...)
	b = append(b, "}\n\n"...)
	return b
}

// tenantWatchType is what a scoped caller's watch across tenants sends for
// an event: nothing for a tenant it may not see, DELETED for a tenant that
// has just left its view (its labels moved out of a binding's selector), ADDED
// for one that has just entered it.
func tenantWatchType(kind *domain.KindInfo, ev projections.WatchEvent, g *streamGuard, shown map[string]bool) (string, bool) {
	if kind != domain.TenantKind {
		return ev.Type, g.tenantVisible(tenantOfObject(kind, ev.Object))
	}
	// A tenant is judged by the labels it has in this event, so a watch that
	// lags behind the writes still sends every move in and out of view.
	var t struct {
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if json.Unmarshal(ev.Object, &t) != nil {
		return "", false
	}
	tenant := t.Metadata.Name
	see := domain.RoleRank(g.access().TenantRole(tenant, t.Metadata.Labels)) > 0
	was := shown[tenant]
	switch {
	case see && ev.Type == projections.WatchDeleted:
		delete(shown, tenant)
		return ev.Type, true
	case see:
		shown[tenant] = true
		if !was && ev.Type == projections.WatchModified {
			return projections.WatchAdded, true
		}
		return ev.Type, true
	case was:
		delete(shown, tenant)
		return projections.WatchDeleted, true
	}
	return "", false
}
