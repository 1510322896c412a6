package handlers

import (
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// streamGuard re-checks a watch's or a follow's access while it runs: the
// credential is authenticated again (a revoked token, an ended session, a
// deleted or disabled user fail), and the route is judged again with the
// identity's bindings and the tenants' labels as they are now. The stream
// ends with an ERROR event carrying the Status when access is gone.
// Filters read the current access from any goroutine.
type streamGuard struct {
	a     *API
	c     echo.Context
	cur   atomic.Pointer[guardState]
	every time.Duration
}

type guardState struct {
	id  identity.Identity
	acc domain.Access
}

func (a *API) newStreamGuard(c echo.Context) *streamGuard {
	g := &streamGuard{a: a, c: c, every: a.cfg.AccessRecheckInterval}
	g.cur.Store(&guardState{id: identityOf(c), acc: accessOf(c)})
	return g
}

// ticker fires when the guard should re-check; the caller stops it.
func (g *streamGuard) ticker() *time.Ticker { return time.NewTicker(g.every) }

// access is the stream's access as last checked.
func (g *streamGuard) access() domain.Access { return g.cur.Load().acc }

// identity is the stream's identity as last checked.
func (g *streamGuard) identity() identity.Identity { return g.cur.Load().id }

// recheck authenticates the request again and judges its route; it answers
// the error to end the stream with, or nil. It only reads the request.
func (g *streamGuard) recheck() error {
	if g.a.auth == nil {
		return nil
	}
	id, err := g.a.auth.Authenticate(g.c.Request())
	if err != nil {
		return err
	}
	acc := id.Access()
	g.cur.Store(&guardState{id: id, acc: acc})
	return g.a.judge(g.c, id, acc)
}

// watchOver runs recheck every interval until ctx ends and calls end with
// the first error: for plain-text follows, which cannot send an ERROR event.
func (g *streamGuard) watchOver(ctx interface{ Done() <-chan struct{} }, end func(error)) {
	t := g.ticker()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := g.recheck(); err != nil {
				end(err)
				return
			}
		}
	}
}

// tenantVisible says whether the stream's caller may see the tenant now.
func (g *streamGuard) tenantVisible(tenant string) bool {
	return domain.RoleRank(g.a.tenantRole(g.access(), tenant)) > 0
}
