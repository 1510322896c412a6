package handlers

import (
	"context"
	"encoding/json"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// respondAfter runs a kind's after-write work, then responds; fields it returns
// (a new API token, shown once) are added to the answer.
func (a *API) respondAfter(c echo.Context, code int, res eventstore.Result, after afterWrite) error {
	if after == nil || res.Duplicate {
		return a.respond(c, code, res)
	}
	extra, err := after(c.Request().Context(), res)
	if err != nil {
		return err
	}
	if len(extra) == 0 {
		return a.respond(c, code, res)
	}
	if res.Seq > 0 {
		ctx, cancel := context.WithTimeout(c.Request().Context(), a.cfg.ReadAfterWriteTimeout)
		_ = a.cache.WaitFor(ctx, res.Seq)
		cancel()
	}
	obj := res.Object
	if obj == nil {
		obj = res.Last
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	for k, v := range extra {
		m[k] = v
	}
	return c.JSON(code, m)
}

// respond waits until this replica's read model includes the write, so the
// client's next read sees it, then sends the object.
func (a *API) respond(c echo.Context, code int, res eventstore.Result) error {
	if res.Seq > 0 {
		ctx, cancel := context.WithTimeout(c.Request().Context(), a.cfg.ReadAfterWriteTimeout)
		err := a.cache.WaitFor(ctx, res.Seq)
		cancel()
		if err != nil {
			a.log.Warn("read model behind a write", "seq", res.Seq, "err", err)
		}
	}
	if res.Duplicate {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	if res.Object != nil {
		// The read model already holds these bytes; send them rather than encode again.
		if raw, seq, ok := a.cache.GetAt(res.Object.Ref()); ok && seq == res.Seq {
			return c.JSONBlob(code, raw)
		}
	}
	obj := res.Object
	if obj == nil {
		obj = res.Last
	}
	return c.JSON(code, obj)
}

func (a *API) readBarrier(ctx context.Context) error {
	if !a.cfg.ConsistentReads {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ReadAfterWriteTimeout)
	defer cancel()
	if err := a.cache.Sync(ctx); err != nil {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "the read model is catching up; retry", RetryAfterSeconds: 1}
	}
	return nil
}
