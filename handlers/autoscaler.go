package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/autoscaling"
	"github.com/rezuscloud/rezuscloud/domain"
)

// AutoscalerCertificates issues, lists and revokes the cluster-autoscaler's
// client certificates (autoscaling.PKI behind an adapter in cmd/).
type AutoscalerCertificates interface {
	// Issue returns a new certificate of tenant: certificate, key and CA in
	// PEM, its serial and expiry. The key is never stored.
	Issue(ctx context.Context, tenant, actor string, validity time.Duration) (AutoscalerCredentials, error)
	// List lists the tenant's certificates not revoked.
	List(ctx context.Context, tenant string) ([]AutoscalerCertificate, error)
	// Revoke revokes one (a NotFound domain error when there is none).
	Revoke(ctx context.Context, tenant, serial string) error
	// Endpoint is the address the autoscaler dials (host:port).
	Endpoint() string
}

// AutoscalerCertificate is one issued certificate, without its key.
type AutoscalerCertificate struct {
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"notAfter"`
	IssuedAt time.Time `json:"issuedAt"`
	IssuedBy string    `json:"issuedBy"`
}

// AutoscalerCredentials is what the autoscaler needs to dial the service.
type AutoscalerCredentials struct {
	AutoscalerCertificate
	Tenant      string `json:"tenant"`
	Endpoint    string `json:"endpoint"`
	Certificate string `json:"certificate"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
}

func (a *API) autoscalerRoutes(g *authed) {
	g.GET("/tenants/:tenant/autoscaler/certificates", a.listAutoscalerCertificates)
	g.POST("/tenants/:tenant/autoscaler/certificates", a.issueAutoscalerCertificate)
	g.DELETE("/tenants/:tenant/autoscaler/certificates/:name", a.revokeAutoscalerCertificate)
}

func (a *API) autoscalerTenant(c echo.Context) (string, error) {
	if a.autoscaler == nil {
		return "", &domain.Error{Reason: domain.ReasonServiceUnavailable,
			Message: "this server does not serve the cluster-autoscaler (start it with --autoscaler-listen)"}
	}
	tenant := c.Param("tenant")
	if _, ok := a.cache.GetObject(domain.TenantRef(tenant)); !ok {
		return "", domain.NewNotFound(domain.TenantKind.Kind, tenant)
	}
	return tenant, nil
}

func (a *API) listAutoscalerCertificates(c echo.Context) error {
	tenant, err := a.autoscalerTenant(c)
	if err != nil {
		return err
	}
	items, err := a.autoscaler.List(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"apiVersion": domain.APIVersion, "kind": "AutoscalerCertificateList",
		"tenant": tenant, "endpoint": a.autoscaler.Endpoint(), "items": items})
}

// issueAutoscalerCertificate issues a certificate for the tenant's
// autoscaler; body {"validity": "720h"} (optional). Audited as a
// credential download: the answer holds the key.
func (a *API) issueAutoscalerCertificate(c echo.Context) error {
	tenant, err := a.autoscalerTenant(c)
	if err != nil {
		return err
	}
	var body struct {
		Validity string `json:"validity"`
	}
	if c.Request().ContentLength != 0 {
		raw, err := a.readBody(c, "application/json")
		if err != nil {
			return err
		}
		if causes := domain.DecodeStrict(raw, &body, ""); causes != nil {
			return domain.NewBadRequest("the request body is not valid: "+causeSummary(causes), causes...)
		}
	}
	var validity time.Duration
	if body.Validity != "" {
		if validity, err = time.ParseDuration(body.Validity); err != nil {
			return domain.NewInvalid("AutoscalerCertificate", tenant, []domain.Cause{{Field: "validity", Type: domain.CauseInvalid,
				Message: "a duration such as 720h"}})
		}
	}
	creds, err := a.autoscaler.Issue(c.Request().Context(), tenant, identityOf(c).Name, validity)
	if err != nil {
		return err
	}
	a.AuditCredentialDownload(c, CredentialAutoscaler, tenant, creds.Serial)
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, creds)
}

func (a *API) revokeAutoscalerCertificate(c echo.Context) error {
	tenant, err := a.autoscalerTenant(c)
	if err != nil {
		return err
	}
	serial := c.Param("name")
	a.AuditCredentialDownload(c, CredentialAutoscaler, tenant, serial)
	if err := a.autoscaler.Revoke(c.Request().Context(), tenant, serial); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// NewAutoscalerCertificates serves the routes from the autoscaler
// service's PKI; endpoint is the address its listener is reached at.
func NewAutoscalerCertificates(p *autoscaling.PKI, endpoint string) AutoscalerCertificates {
	return pkiCertificates{p: p, endpoint: endpoint}
}

type pkiCertificates struct {
	p        *autoscaling.PKI
	endpoint string
}

func (c pkiCertificates) Endpoint() string { return c.endpoint }

func (c pkiCertificates) Issue(ctx context.Context, tenant, actor string, validity time.Duration) (AutoscalerCredentials, error) {
	cr, err := c.p.Issue(ctx, tenant, actor, validity)
	if err != nil {
		return AutoscalerCredentials{}, err
	}
	return AutoscalerCredentials{AutoscalerCertificate: certificateOf(cr.Issued), Tenant: tenant, Endpoint: c.endpoint,
		Certificate: string(cr.CertPEM), Key: string(cr.KeyPEM), CA: string(cr.CAPEM)}, nil
}

func (c pkiCertificates) List(ctx context.Context, tenant string) ([]AutoscalerCertificate, error) {
	issued, err := c.p.List(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]AutoscalerCertificate, 0, len(issued))
	for _, i := range issued {
		out = append(out, certificateOf(i))
	}
	return out, nil
}

func (c pkiCertificates) Revoke(ctx context.Context, tenant, serial string) error {
	return c.p.Revoke(ctx, tenant, serial)
}

func certificateOf(i autoscaling.Issued) AutoscalerCertificate {
	return AutoscalerCertificate{Serial: i.Serial, NotAfter: i.NotAfter, IssuedAt: i.IssuedAt, IssuedBy: i.IssuedBy}
}
