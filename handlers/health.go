package handlers

import (
	"fmt"
	"net/http"
	"runtime"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (a *API) healthz(c echo.Context) error { return c.String(http.StatusOK, "ok") }

// readyz is ready when NATS is connected, the read model has caught up with the
// stream and the KV projector has drained its backlog once.
func (a *API) readyz(c echo.Context) error {
	var problems []string
	if a.lameDuck.Load() {
		problems = append(problems, "lame duck: this replica is shutting down, other replicas serve")
	}
	if a.store.Conn().Status() != nats.CONNECTED {
		problems = append(problems, "nats: "+a.store.Conn().Status().String())
	}
	if !a.cache.Ready() {
		problems = append(problems, fmt.Sprintf("read model catching up (at %d)", a.cache.Seq()))
	}
	if a.projector != nil && !a.projector.CaughtUp() {
		problems = append(problems, fmt.Sprintf("projections catching up (at %d)", a.projector.Checkpoint()))
	}
	if a.identity != nil && !a.identity.Ready() {
		problems = append(problems, "creating the first admin")
	}
	if len(problems) > 0 {
		st := domain.StatusOf(&domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "not ready: " + fmt.Sprint(problems)})
		return c.JSON(http.StatusServiceUnavailable, st)
	}
	return c.String(http.StatusOK, "ok")
}

// version says the release, and the storage schema levels: the newest
// this replica reads and writes, and the lowest every running replica
// reads (what is written; /api/v1/replicas names the replicas).
func (a *API) version(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"version": a.cfg.Version, "goVersion": runtime.Version(), "apiVersion": domain.APIVersion,
		"schemaLevel": domain.SchemaLevel, "clusterSchemaLevel": a.clusterView().ClusterLevel})
}

// recoverMiddleware turns a panic into a 500 Status instead of a dropped connection.
func (a *API) recoverMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return next(c)
	}
}
