package handlers

import (
	"fmt"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// remediationHooks keep remediations written by the remediation controller
// and the apply worker: a user reads them, and may delete a finished one
// (its history) but not one being carried out.
type remediationHooks struct {
	noHooks
	a *API
}

func (h *remediationHooks) admit(_ echo.Context, op domain.Op, ref domain.Ref, _ *domain.Object) (afterWrite, error) {
	if op != domain.OpDelete {
		return nil, &domain.Error{Reason: domain.ReasonMethodNotAllowed,
			Message: fmt.Sprintf("remediations are recorded by the remediation controller (%s refused); set a node group's spec.remediation to have its machines replaced", op)}
	}
	r, ok, err := projections.Get[domain.Remediation](h.a.cache, ref)
	if err != nil || !ok {
		return nil, err
	}
	if !r.Status.Finished() {
		return nil, domain.NewConflict(domain.RemediationKind.Kind, ref.Name,
			fmt.Sprintf("remediation %s is %s: machine %s is being replaced; delete it once it has Succeeded or Failed", ref.Name, r.Status.Phase, r.Spec.Machine))
	}
	return nil, nil
}

func (h *remediationHooks) admitPatch(_ echo.Context, _ domain.Ref, _ map[string]any) (afterWrite, error) {
	return nil, &domain.Error{Reason: domain.ReasonMethodNotAllowed, Message: "remediations are recorded by the remediation controller and cannot be changed"}
}
