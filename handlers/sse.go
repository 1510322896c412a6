package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// followContext counts a followed plain-text stream (an apply's or a
// machine's log) against MaxWatches and MaxWatchesPerUser and gives it a context that ends with the
// client or the server's shutdown; the caller defers done. Beyond the limit
// it fails as acquireStream does.
func (a *API) followContext(c echo.Context) (ctx context.Context, done func(), err error) {
	release, err := a.acquireStream(c)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(c.Request().Context())
	stop := context.AfterFunc(a.stopping, cancel)
	// The caller's access is checked again while the stream runs; when it is
	// gone the stream ends.
	g := a.newStreamGuard(c)
	guarded := make(chan struct{})
	go func() {
		defer close(guarded)
		g.watchOver(ctx, func(error) { cancel() })
	}()
	return ctx, func() {
		stop()
		cancel()
		<-guarded
		release()
	}, nil
}

// startSSE answers 200 with an event stream and returns a writer that flushes
// each frame and drops a client that does not take one within
// WatchWriteTimeout; the caller defers end.
func (a *API) startSSE(c echo.Context) (write func([]byte) error, end func()) {
	resp := c.Response()
	h := resp.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	resp.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(resp.Writer)
	a.metrics.watches.Inc()
	write = func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.WatchWriteTimeout))
		if _, err := resp.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	return write, a.metrics.watches.Dec
}
