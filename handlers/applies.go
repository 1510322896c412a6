package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/controllers/apply"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// ApplyLogs serves the logs of applies (tofu.Logs).
type ApplyLogs interface {
	Follow(ctx context.Context, tenant, apply string, follow bool, send func([]byte) error) error
}

// ApplyCanceler stops a running apply (apply.Cancel over the store's NATS connection).
type ApplyCanceler func(ctx context.Context, tenant, apply string) error

// applyHooks keep applies written by the apply worker only.
type applyHooks struct{ noHooks }

func (applyHooks) admit(_ echo.Context, op domain.Op, ref domain.Ref, _ *domain.Object) (afterWrite, error) {
	return nil, &domain.Error{Reason: domain.ReasonMethodNotAllowed,
		Message: fmt.Sprintf("applies are recorded by the apply worker and cannot be changed (%s refused); to stop a run, POST .../applies/%s/cancel", op, ref.Name)}
}

func (applyHooks) admitPatch(_ echo.Context, ref domain.Ref, _ map[string]any) (afterWrite, error) {
	return nil, &domain.Error{Reason: domain.ReasonMethodNotAllowed,
		Message: fmt.Sprintf("applies are recorded by the apply worker and cannot be changed; to stop a run, POST .../applies/%s/cancel", ref.Name)}
}

func (a *API) applyRoutes(g *authed) {
	g.GET("/tenants/:tenant/applies/:name/log", a.applyLog)
	g.POST("/tenants/:tenant/applies/:name/cancel", a.cancelApply)
}

// loadApply reads an apply from the read model.
func (a *API) loadApply(c echo.Context) (*domain.Apply, error) {
	ref := domain.ObjectRef(domain.ApplyKind, c.Param("tenant"), c.Param("name"))
	ap, ok, err := projections.Get[domain.Apply](a.cache, ref)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, domain.NewNotFound(domain.ApplyKind.Kind, ref.Name)
	}
	return ap, nil
}

// applyLog answers an apply's tofu log as text; with ?follow=true it streams
// the rest while the run goes on and ends when the run does.
func (a *API) applyLog(c echo.Context) error {
	if a.applyLogs == nil {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "the apply worker is not enabled on this server"}
	}
	ap, err := a.loadApply(c)
	if err != nil {
		return err
	}
	follow := false
	switch c.QueryParam("follow") {
	case "", "false", "0":
	case "true", "1":
		follow = true
	default:
		return domain.NewBadRequest(`follow must be "true" or "false"`, domain.Cause{Field: "follow", Type: domain.CauseInvalid, Message: "must be true or false"})
	}
	ctx := c.Request().Context()
	if follow {
		fctx, done, err := a.followContext(c)
		if err != nil {
			return err
		}
		defer done()
		ctx = fctx
	}
	resp := c.Response()
	started := false
	rc := http.NewResponseController(resp.Writer)
	send := func(b []byte) error {
		if !started {
			started = true
			resp.Header().Set("Content-Type", "text/plain; charset=utf-8")
			resp.Header().Set("Cache-Control", "no-cache")
			resp.Header().Set("X-Accel-Buffering", "no")
			resp.WriteHeader(http.StatusOK)
		}
		_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.WatchWriteTimeout))
		if _, err := resp.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	err = a.applyLogs.Follow(ctx, ap.Metadata.Tenant, ap.Metadata.Name, follow && !ap.Status.Final(), send)
	if errors.Is(err, tofu.ErrLogNotFound) && !started {
		if ap.Status.Phase == domain.ApplyQueued {
			return send(nil)
		}
		return &domain.Error{Reason: domain.ReasonNotFound, Message: fmt.Sprintf("apply %q has no log (it may have been pruned)", ap.Metadata.Name)}
	}
	if err != nil && !started {
		return err
	}
	if !started {
		return send(nil)
	}
	return nil
}

// cancelApply stops a running apply; the run ends Canceled.
func (a *API) cancelApply(c echo.Context) error {
	if a.cancelRun == nil {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "the apply worker is not enabled on this server"}
	}
	ap, err := a.loadApply(c)
	if err != nil {
		return err
	}
	if ap.Status.Final() {
		return domain.NewConflict(domain.ApplyKind.Kind, ap.Metadata.Name, fmt.Sprintf("the apply has already finished (%s)", ap.Status.Phase))
	}
	if err := a.cancelRun(c.Request().Context(), ap.Metadata.Tenant, ap.Metadata.Name); err != nil {
		if errors.Is(err, apply.ErrNotRunning) {
			return domain.NewConflict(domain.ApplyKind.Kind, ap.Metadata.Name, err.Error())
		}
		return err
	}
	return c.JSON(http.StatusAccepted, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Success",
		"message": fmt.Sprintf("apply %s is being canceled", ap.Metadata.Name), "code": http.StatusAccepted})
}
