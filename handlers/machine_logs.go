package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// MachineLogReader reads a machine's logs through the Talos API;
// talos.LogReader is the one used. Both calls answer domain errors: NotFound
// for an unknown machine or service, ServiceUnavailable when the node cannot
// be reached. The reader ends with the stream; closing it ends the call.
type MachineLogReader interface {
	Logs(ctx context.Context, tenant, machine, service string, follow bool, tailLines int32) (io.ReadCloser, error)
	Dmesg(ctx context.Context, tenant, machine string, follow bool) (io.ReadCloser, error)
}

// MaxLogTail bounds ?tail= of a machine's log.
const MaxLogTail = 10000

// serviceID is what a Talos service id looks like (apid, etcd, kubelet, ext-foo, ...).
var serviceID = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// machineLogRoutes serve a machine's service logs and kernel messages, read
// only, for every role: lower-layer state the API surfaces but never changes.
func (a *API) machineLogRoutes(g *authed) {
	g.GET("/tenants/:tenant/machines/:name/logs", a.machineLogs)
	g.GET("/tenants/:tenant/machines/:name/dmesg", a.machineDmesg)
}

// machineLogs serves GET .../machines/{m}/logs?service=&follow=&tail= as text.
func (a *API) machineLogs(c echo.Context) error {
	q := c.QueryParams()
	var causes []domain.Cause
	service := q.Get("service")
	switch {
	case service == "":
		causes = append(causes, domain.Cause{Field: "service", Type: domain.CauseRequired, Message: "name the service whose log to read (apid, machined, kubelet, etcd, ...)"})
	case !serviceID.MatchString(service):
		causes = append(causes, domain.Cause{Field: "service", Type: domain.CauseInvalid, Message: strconv.Quote(service) + " is not a service id (lower-case letters, digits, '.', '_' and '-')"})
	}
	tail := int32(-1)
	if s := q.Get("tail"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLogTail {
			causes = append(causes, domain.Cause{Field: "tail", Type: domain.CauseInvalid, Message: fmt.Sprintf("must be a whole number from 1 to %d", MaxLogTail)})
		} else {
			tail = int32(n)
		}
	}
	follow, fc := followParam(c)
	causes = append(causes, fc...)
	tenant, name, err := a.logParams(c, causes)
	if err != nil {
		return err
	}
	return a.streamLog(c, follow, func(ctx context.Context) (io.ReadCloser, error) {
		return a.machineLog.Logs(ctx, tenant, name, service, follow, tail)
	})
}

// machineDmesg serves GET .../machines/{m}/dmesg?follow= as text.
func (a *API) machineDmesg(c echo.Context) error {
	follow, causes := followParam(c)
	tenant, name, err := a.logParams(c, causes)
	if err != nil {
		return err
	}
	return a.streamLog(c, follow, func(ctx context.Context) (io.ReadCloser, error) {
		return a.machineLog.Dmesg(ctx, tenant, name, follow)
	})
}

func followParam(c echo.Context) (bool, []domain.Cause) {
	switch s := c.QueryParam("follow"); s {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		return false, []domain.Cause{{Field: "follow", Type: domain.CauseInvalid, Message: strconv.Quote(s) + " is not true or false"}}
	}
}

// logParams checks the URL and query (causes so far), that the reader is
// wired and that the machine exists.
func (a *API) logParams(c echo.Context, causes []domain.Cause) (tenant, name string, err error) {
	tenant, name = c.Param("tenant"), c.Param("name")
	causes = append(append(domain.ValidateName(tenant, "metadata.tenant"), domain.ValidateName(name, "metadata.name")...), causes...)
	if causes != nil {
		return "", "", domain.NewBadRequest("invalid log request", causes...)
	}
	if a.machineLog == nil {
		return "", "", &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "reading machine logs is not enabled on this server"}
	}
	if err := a.readBarrier(c.Request().Context()); err != nil {
		return "", "", err
	}
	m, ok, err := projections.Get[domain.Machine](a.cache, domain.ObjectRef(domain.MachineKind, tenant, name))
	if err != nil {
		return "", "", err
	}
	if !ok {
		return "", "", domain.NewNotFound(domain.MachineKind.Kind, name)
	}
	if m.Spec.Address == "" {
		return "", "", domain.NewConflict(domain.MachineKind.Kind, name, "it has no address yet, so its Talos API cannot be reached")
	}
	return tenant, name, nil
}

// streamLog answers what open reads as text, flushing each chunk. A followed
// log counts against MaxWatches and ends with the client, the node or the
// server's shutdown.
func (a *API) streamLog(c echo.Context, follow bool, open func(context.Context) (io.ReadCloser, error)) error {
	ctx := c.Request().Context()
	if follow {
		fctx, done, err := a.followContext(c)
		if err != nil {
			return err
		}
		defer done()
		ctx = fctx
	}
	rd, err := open(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // the client went, or the server is stopping
		}
		return err
	}
	defer rd.Close()
	resp := c.Response()
	h := resp.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	resp.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(resp.Writer)
	_ = rc.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, rerr := rd.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.WatchWriteTimeout))
			if _, err := resp.Write(buf[:n]); err != nil {
				return nil
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) && ctx.Err() == nil {
				// The answer has begun: say why it ends in the text itself.
				a.log.Warn("machine log stream ended", "path", c.Request().URL.Path, "err", rerr)
				_, _ = fmt.Fprintf(resp, "\n[rezuscloud: %v]\n", rerr)
				_ = rc.Flush()
			}
			return nil
		}
	}
}
