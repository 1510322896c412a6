package controller

import (
	"context"
	"strconv"
	"strings"
)

// runHeld runs key under its tenant's hold: the run ends when the hold
// does, when the scheduler stops, and (while a replica of an earlier
// release runs) when the lease is lost; its appends check the hold
// (eventstore.WithFence, set on the hold's context). Before the first run
// of a tenant taken here, the controller finishes what the previous holder
// left (Acquirer); before every run, the read model catches up with the
// events the entry names, which the replica that queued them had.
func (r *Runtime) runHeld(ctx context.Context, hold Hold, key string, e Entry, attempt int, acquired bool, q *Queue) Result {
	defer hold.End()
	rctx, cancel := context.WithCancelCause(hold.Ctx)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	if r.cfg.Tenants.Legacy() {
		lctx := r.leadContext()
		if lctx == nil {
			return Later(0) // the lease went between the start and now
		}
		stopLead := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
		defer stopLead()
	}
	if acquired {
		if r.cfg.ReadModel != nil {
			if err := r.cfg.ReadModel.Sync(rctx); err != nil {
				return Retry()
			}
		}
		if a, ok := r.c.(Acquirer); ok {
			if err := a.Acquired(rctx, r.cfg.TenantOf(key), q); err != nil {
				if rctx.Err() == nil {
					r.cfg.Log.Warn("finishing what the previous holder of a tenant left", "lease", r.cfg.Lease, "key", key, "err", err)
				}
				return Retry()
			}
		}
	}
	if r.cfg.ReadModel != nil {
		if seq := newestSource(e); seq > 0 {
			if err := r.cfg.ReadModel.WaitFor(rctx, seq); err != nil {
				return Retry()
			}
		}
	}
	return r.c.Reconcile(rctx, key, e, attempt)
}

// newestSource is the highest event sequence among an entry's sources
// ("<Kind>/<name>@<sequence>"; others, such as "resync", name none).
func newestSource(e Entry) uint64 {
	var top uint64
	for _, s := range e.Sources {
		_, after, ok := strings.Cut(s, "@")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(after, 10, 64); err == nil && n > top {
			top = n
		}
	}
	return top
}

// flushTenant writes to the queue bucket the changes absorbed here for the
// keys of a tenant this replica gives up, so that the replica taking it
// sees them in the entries (and waits for their events) rather than
// losing their detail with this replica's memory.
func (r *Runtime) flushTenant(ctx context.Context, q *Queue, tenant string) {
	for _, k := range r.absorbed.keysOf(func(key string) bool { return r.cfg.TenantOf(key) == tenant }) {
		e, had := r.absorbed.take(k, Entry{})
		if !had {
			continue
		}
		sources := e.Sources
		if len(sources) == 0 {
			sources = []string{""}
		}
		for _, src := range sources {
			if err := q.Add(ctx, k, src); err != nil && ctx.Err() == nil {
				r.cfg.Log.Warn("queueing absorbed changes of a tenant that moves", "queue", r.cfg.Queue, "key", k, "err", err)
			}
		}
	}
}
