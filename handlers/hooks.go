package handlers

// The generic REST verbs (resources.go) serve every kind; a kind with rules
// of its own (users' write-only passwords, tokens' ownership, config
// patches checked by machinery, …) takes part through its kindHooks,
// chosen by hooksFor.

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// afterWrite runs once a write succeeded; what it returns is added to the answer.
type afterWrite func(ctx context.Context, res eventstore.Result) (extra map[string]any, err error)

// kindHooks let a kind take part in the generic REST verbs: strip write-only
// fields, check ownership, and act on secrets around the write.
type kindHooks interface {
	// admit runs before a create, update or delete (obj is nil for delete).
	admit(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error)
	// admitPatch runs before a merge patch, with the decoded patch.
	admitPatch(c echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error)
	// visible says whether the caller may read the object.
	visible(c echo.Context, raw []byte) bool
}

type noHooks struct{}

func (noHooks) admit(echo.Context, domain.Op, domain.Ref, *domain.Object) (afterWrite, error) {
	return nil, nil
}
func (noHooks) admitPatch(echo.Context, domain.Ref, map[string]any) (afterWrite, error) {
	return nil, nil
}
func (noHooks) visible(echo.Context, []byte) bool { return true }

// visibilityFilter marks the hooks whose visible hides objects from some
// callers: their lists are filtered item by item (and lose the remaining
// count); every other kind's list is the cache's page as it is.
type visibilityFilter interface{ filtersVisibility() }

func (a *API) hooksFor(k *domain.KindInfo) kindHooks {
	switch k {
	case domain.UserKind:
		return &userHooks{a: a}
	case domain.APITokenKind:
		return &tokenHooks{a: a}
	case domain.ConfigPatchKind:
		return &configPatchHooks{a: a}
	case domain.ApplyKind:
		return applyHooks{}
	case domain.RemediationKind:
		return &remediationHooks{a: a}
	case domain.UpgradeKind:
		return &upgradeHooks{a: a}
	case domain.EtcdBackupKind:
		return &etcdBackupHooks{a: a}
	case domain.RestoreKind:
		return &restoreHooks{a: a}
	case domain.TenantKind:
		return tenantLabelHooks{kindHooks: a.tenantHooks(), a: a}
	case domain.NodeGroupKind:
		return a.nodeGroupHooks()
	case domain.ProviderKind:
		return a.providerHooks()
	case domain.MachineKind:
		return a.machineHooks()
	}
	return noHooks{}
}
