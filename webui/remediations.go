package webui

import (
	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

func remediationMeta(r *domain.Remediation) *domain.ObjectMeta { return &r.Metadata }

// remediationRows is the live table of the tenant's newest remediations
// (the machines replaced because they were unhealthy), with every step.
func (u *UI) remediationRows(c echo.Context, tenant string) (templ.Component, error) {
	rs, err := listOf[domain.Remediation](u, c.Request(), "/tenants/"+tenant+"/remediations")
	if err != nil {
		return nil, err
	}
	newestFirst(rs, remediationMeta)
	return remediationTable(firstN(rs, 20)), nil
}
