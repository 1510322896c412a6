package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// wantedFor is how long a tenant stays wanted after a run last asked for it.
const wantedFor = 2 * time.Minute

// Run provisions the claims bucket and keeps this replica's claims until
// ctx ends; then its holds end and, once their runs have, Drained closes.
func (t *Tenants) Run(ctx context.Context) error {
	var releases sync.WaitGroup
	defer func() {
		t.leave()
		releases.Wait()
		close(t.drained)
	}()
	err := eventstore.UntilClusterReady(ctx, func() error {
		kv, err := t.cfg.Store.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: ClaimsBucket, Description: "which replica works each tenant", History: 1,
			Storage: jetstream.FileStorage, Replicas: t.cfg.Store.Replicas(),
		})
		if err != nil {
			return fmt.Errorf("provisioning bucket %s: %w", ClaimsBucket, err)
		}
		t.kv = kv
		return nil
	})
	if err != nil {
		return err
	}
	var watchdog sync.WaitGroup
	watchdog.Add(1)
	go func() { defer watchdog.Done(); t.watchdog(ctx) }()
	defer watchdog.Wait()
	released := make(chan releaseDone)
	var stale *time.Timer
	for ctx.Err() == nil {
		watch, err := t.kv.WatchAll(ctx)
		if err != nil {
			if ctx.Err() == nil {
				t.cfg.Log.Warn("tenant claims: watching", "err", err)
				if sleepFor(ctx, time.Second) != nil {
					return nil
				}
			}
			continue
		}
		t.follow(ctx, watch, &stale, &releases, released)
		_ = watch.Stop()
	}
	return nil
}

// follow decides and makes the claims' changes as the claims bucket, the
// heartbeats and runs change, until ctx ends or the watch does (a cluster
// that lost its quorum, say: Run watches again).
func (t *Tenants) follow(ctx context.Context, watch jetstream.KeyWatcher, stale **time.Timer, releases *sync.WaitGroup, released chan releaseDone) {
	var last time.Time
	for {
		// A step looks at every tenant: steps are paced, so that a burst
		// of claims (each of this replica's own writes comes back on the
		// watch) or of new tenants costs a step per gap, not one each.
		if !t.pace(ctx, watch, last.Add(minStepGap), released) {
			return
		}
		last = time.Now()
		var staleC <-chan time.Time
		if deadline := t.step(ctx, releases, released); !deadline.IsZero() {
			if *stale == nil {
				*stale = time.NewTimer(time.Until(deadline))
			} else {
				(*stale).Reset(time.Until(deadline))
			}
			staleC = (*stale).C
		}
		select {
		case <-ctx.Done():
			return
		case <-staleC:
		case <-t.wake:
		case <-t.cfg.Members.Changed():
		case d := <-released:
			t.releaseEnded(d)
		case e, ok := <-watch.Updates():
			if !ok {
				return
			}
			t.noteClaim(e)
			// Take in the burst a watch start or a move brings at once.
			for more := true; more; {
				select {
				case e, ok := <-watch.Updates():
					if !ok {
						return
					}
					t.noteClaim(e)
				default:
					more = false
				}
			}
		}
	}
}

// minStepGap is the least time between two steps of the claims.
const minStepGap = 200 * time.Millisecond

// pace waits until next, taking in the claims' changes and the releases
// that end meanwhile; false when ctx or the watch ended.
func (t *Tenants) pace(ctx context.Context, watch jetstream.KeyWatcher, next time.Time, released chan releaseDone) bool {
	wait := time.Until(next)
	if wait <= 0 {
		return true
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case d := <-released:
			t.releaseEnded(d)
		case e, ok := <-watch.Updates():
			if !ok {
				return false
			}
			t.noteClaim(e)
		}
	}
}

// watchdog ends every hold when this replica's heartbeat goes stale, by
// the clock: the claims' loop may be waiting on a cluster that lost its
// quorum, and the runs must end before another replica may take their
// tenants.
func (t *Tenants) watchdog(ctx context.Context) {
	for {
		m := t.cfg.Members
		last := m.LastBeat()
		wait := m.Interval()
		if !last.IsZero() {
			wait = time.Until(last.Add(m.TTL() - m.Interval()/2))
		}
		if wait <= 0 {
			t.mu.Lock()
			if t.fresh || len(t.held) > 0 {
				t.cfg.Log.Warn("tenant claims: heartbeat not fresh; stopping work on every tenant", "held", len(t.held))
			}
			t.fresh = false
			t.dropAllLocked(errStale)
			t.mu.Unlock()
			wait = m.Interval() / 4 // until it beats again
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// sleepFor waits d or until ctx ends.
func sleepFor(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// leaveTimeout bounds how long a stopping replica waits for its runs to end
// and gives its claims back.
const leaveTimeout = 30 * time.Second

// leave ends every hold and, once their runs have ended, deletes this
// replica's claims, so the others take its tenants at once instead of when
// its heartbeat goes.
func (t *Tenants) leave() {
	t.mu.Lock()
	type leaving struct {
		name string
		h    *hold
		idle chan struct{}
	}
	var all []leaving
	for name, h := range t.held {
		h.cancel(context.Canceled)
		h.releasing = true
		idle := make(chan struct{})
		if h.runs == 0 {
			close(idle)
		} else {
			h.idle = idle
		}
		all = append(all, leaving{name: name, h: h, idle: idle})
	}
	t.notifyLocked()
	t.mu.Unlock()
	if t.kv == nil || len(all) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	given := 0
	for _, l := range all {
		select {
		case <-l.idle:
		case <-ctx.Done():
			t.cfg.Log.Warn("tenant claims: runs still going when leaving; their tenants move when the heartbeat goes", "tenant", l.name)
			continue
		}
		if err := t.kv.Delete(ctx, l.name, jetstream.LastRevision(l.h.rev)); err == nil {
			given++
		}
	}
	t.mu.Lock()
	clear(t.held)
	t.mu.Unlock()
	t.cfg.Log.Info("tenant claims: left", "tenants", given)
}

// noteClaim records an entry of the claims bucket (nil: the watch's
// initial values are in).
func (t *Tenants) noteClaim(e jetstream.KeyValueEntry) {
	if e == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.claims[e.Key()]; ok && c.Rev > e.Revision() {
		return // older than this replica's own write, noted before its watch entry
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(t.claims, e.Key())
		return
	}
	t.claims[e.Key()] = decodeClaim(e.Value(), e.Revision())
}

// step decides and makes the claims' changes, and returns when this
// replica's heartbeat goes stale unless it beats again (zero: stale now).
func (t *Tenants) step(ctx context.Context, releases *sync.WaitGroup, released chan<- releaseDone) time.Time {
	m := t.cfg.Members
	deadline := time.Time{}
	if last := m.LastBeat(); !last.IsZero() {
		deadline = last.Add(m.TTL() - m.Interval()/2)
	}
	view := m.View()
	me := m.ID()
	var members []string
	legacy := len(view.UnknownPeers) > 0
	for _, r := range view.Replicas {
		if r.ID == "" {
			legacy = true
			continue
		}
		members = append(members, r.ID)
	}
	t.mu.Lock()
	t.legacy = legacy
	fresh := !deadline.IsZero() && time.Now().Before(deadline)
	if !fresh {
		if t.fresh || len(t.held) > 0 {
			t.cfg.Log.Warn("tenant claims: heartbeat not fresh; stopping work on every tenant", "held", len(t.held))
		}
		t.fresh = false
		t.dropAllLocked(errStale)
		t.mu.Unlock()
		return time.Time{}
	}
	t.fresh = true
	changed := t.syncHeldLocked(me)
	now := time.Now()
	busy := map[string]bool{}
	for name, h := range t.held {
		if h.runs > 0 {
			busy[name] = true
		}
	}
	for name, at := range t.wanted {
		if now.Sub(at) > wantedFor {
			delete(t.wanted, name)
		}
	}
	in := ClaimsInput{Me: me, Members: members, Tenants: t.cfg.Names(), Wanted: boolSet(t.wanted), Busy: busy,
		Claims: cloneClaims(t.claims), Legacy: legacy, OnDemand: cloneSet(t.onDemand)}
	t.mu.Unlock()

	for _, op := range DecideClaims(in) {
		switch op.Kind {
		case Take:
			if t.take(ctx, op) {
				changed = true
			}
		case Give, Drop:
			if t.startRelease(ctx, op, releases, released) {
				changed = true
			}
		}
	}
	if changed {
		t.mu.Lock()
		t.notifyLocked()
		t.mu.Unlock()
	}
	return deadline
}

// syncHeldLocked makes the holds follow the claims: a claim naming this
// replica is held (after a restart of the claims' watch, say), a hold
// whose claim names someone else ends.
func (t *Tenants) syncHeldLocked(me string) bool {
	changed := false
	for name, c := range t.claims {
		if c.Member == me && t.held[name] == nil {
			t.holdLocked(name, c.Rev)
			changed = true
		}
	}
	for name, h := range t.held {
		c, ok := t.claims[name]
		if h.releasing {
			continue // its release ends it
		}
		if !ok || c.Member != me {
			h.cancel(errLost)
			delete(t.held, name)
			changed = true
			continue
		}
		h.rev = c.Rev
	}
	return changed
}

func (t *Tenants) holdLocked(name string, rev uint64) {
	ctx, cancel := context.WithCancelCause(context.Background())
	t.terms++
	h := &hold{rev: rev, term: t.terms, cancel: cancel}
	h.ctx = eventstore.WithFence(ctx, t.fence(name, h))
	t.held[name] = h
}

func (t *Tenants) dropAllLocked(cause error) {
	if len(t.held) == 0 {
		return
	}
	for name, h := range t.held {
		h.cancel(cause)
		if h.idle != nil && h.runs == 0 {
			close(h.idle)
			h.idle = nil
		}
		delete(t.held, name)
	}
	t.notifyLocked()
}

// opTimeout bounds one write of a claim: the loop must not hang on a
// cluster that lost its quorum.
const opTimeout = 3 * time.Second

// take claims a tenant by compare-and-set; false if someone was first. A
// claim of another member is taken only once that member's heartbeat is
// gone.
func (t *Tenants) take(ctx context.Context, op ClaimOp) bool {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	t.mu.Lock()
	prev, claimed := t.claims[op.Tenant]
	t.mu.Unlock()
	if op.Rev != 0 && claimed && prev.Member != "" && prev.Member != t.cfg.Members.ID() {
		alive, err := t.cfg.Members.Alive(ctx, prev.Holder, prev.Member)
		if err != nil || alive {
			return false
		}
	}
	var rev uint64
	var err error
	if op.Rev == 0 {
		rev, err = t.kv.Create(ctx, op.Tenant, t.record())
	} else {
		rev, err = t.kv.Update(ctx, op.Tenant, t.record(), op.Rev)
	}
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			t.cfg.Log.Warn("tenant claims: taking", "tenant", op.Tenant, "err", err)
		}
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.claims[op.Tenant] = Claim{Member: t.cfg.Members.ID(), Rev: rev}
	if h := t.held[op.Tenant]; h != nil {
		h.rev = rev
		return false
	}
	t.holdLocked(op.Tenant, rev)
	t.cfg.Log.Info("tenant claims: working tenant", "tenant", op.Tenant)
	return true
}

// releaseDone is how a release ended.
type releaseDone struct {
	tenant string
	h      *hold
	ok     bool
}

// startRelease marks a held tenant as given up (no run starts, no change
// is absorbed), has the runtimes flush what they absorbed for it, and
// waits, in a goroutine, for its runs to end (canceling them after the
// grace) before it writes the claim.
func (t *Tenants) startRelease(ctx context.Context, op ClaimOp, releases *sync.WaitGroup, done chan<- releaseDone) bool {
	t.mu.Lock()
	h := t.held[op.Tenant]
	if h == nil || h.releasing {
		t.mu.Unlock()
		return false
	}
	h.releasing = true
	idle := make(chan struct{})
	if h.runs == 0 {
		close(idle)
	} else {
		h.idle = idle
	}
	subs := append([]*tenantSub(nil), t.subs...)
	t.mu.Unlock()
	releases.Add(1)
	go func() {
		defer releases.Done()
		for _, s := range subs {
			s.flush(ctx, op.Tenant)
		}
		grace := time.NewTimer(t.cfg.Grace)
		defer grace.Stop()
		select {
		case <-idle:
		case <-grace.C:
			t.cfg.Log.Warn("tenant claims: canceling runs of a tenant that moves", "tenant", op.Tenant, "grace", t.cfg.Grace)
			h.cancel(errGivenUp)
			select {
			case <-idle:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
		h.cancel(errGivenUp)
		ok := false
		if ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			var err error
			if op.Kind == Give {
				raw := t.recordFor(op.To)
				_, err = t.kv.Update(ctx, op.Tenant, raw, h.rev)
			} else {
				err = t.kv.Delete(ctx, op.Tenant, jetstream.LastRevision(h.rev))
			}
			ok = err == nil
			if err != nil && ctx.Err() == nil && !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
				t.cfg.Log.Warn("tenant claims: giving up", "tenant", op.Tenant, "err", err)
			}
		}
		select {
		case done <- releaseDone{tenant: op.Tenant, h: h, ok: ok}:
		case <-ctx.Done():
		}
	}()
	return true
}

// recordFor is the claim record handing a tenant to member.
func (t *Tenants) recordFor(member string) []byte {
	holder := ""
	for _, r := range t.cfg.Members.View().Replicas {
		if r.ID == member {
			holder = r.Holder
		}
	}
	return mustJSON(claimRecord{Version: claimVersion, Member: member, Holder: holder, Since: time.Now().UTC()})
}

// releaseEnded ends a hold whose release is over: the claim is written
// (or someone changed it meanwhile, which the watch shows).
func (t *Tenants) releaseEnded(d releaseDone) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[d.tenant] == d.h {
		delete(t.held, d.tenant)
		t.notifyLocked()
	}
	if d.ok {
		delete(t.claims, d.tenant) // the watch brings the new claim
		t.cfg.Log.Info("tenant claims: tenant handed over", "tenant", d.tenant)
	}
}

func boolSet(m map[string]time.Time) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func cloneSet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneClaims(m map[string]Claim) map[string]Claim {
	out := make(map[string]Claim, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mustJSON(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err) // a struct of strings and a time always encodes
	}
	return raw
}
