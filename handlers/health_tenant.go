package handlers

import (
	"context"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TenantHealthProber probes a tenant's machines through the Talos API;
// health.Service (talos/health) is the one used. Probe answers domain NotFound for an
// unknown tenant; with refresh it does not answer from its cache.
type TenantHealthProber interface {
	Probe(ctx context.Context, tenant string, refresh bool) (domain.TenantHealth, error)
}

// healthRoutes serves GET /tenants/{t}/health (the read role): the tenant's
// health as probed through the Talos API, at most TTL old unless ?refresh=true.
func (a *API) healthRoutes(g *authed) {
	g.GET("/tenants/:tenant/health", a.tenantHealth)
}

func (a *API) tenantHealth(c echo.Context) error {
	tenant := c.Param("tenant")
	if causes := domain.ValidateName(tenant, "metadata.tenant"); causes != nil {
		return domain.NewBadRequest("invalid name in the URL", causes...)
	}
	refresh := false
	if q := c.QueryParam("refresh"); q != "" {
		b, err := strconv.ParseBool(q)
		if err != nil {
			return domain.NewBadRequest("refresh must be true or false",
				domain.Cause{Field: "refresh", Type: domain.CauseInvalid, Message: strconv.Quote(q) + " is not a boolean"})
		}
		refresh = b
	}
	if a.health == nil {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "health probes are not enabled on this server"}
	}
	if err := a.readBarrier(c.Request().Context()); err != nil {
		return err
	}
	if _, ok := a.cache.Get(domain.TenantRef(tenant)); !ok {
		return domain.NewNotFound(domain.TenantKind.Kind, tenant)
	}
	h, err := a.health.Probe(c.Request().Context(), tenant, refresh)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h)
}
