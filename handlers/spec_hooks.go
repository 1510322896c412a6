package handlers

import (
	"encoding/json"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// specHooks check the spec a write would store against what the running
// system can take, before the write: a tenant or node group version a run
// would refuse, a scale-down that would leave etcd without quorum, a provider
// config the provider's own validation rejects. Each check answers causes on
// the field at fault; all of them are reported in one 422.
//
// cur is the stored object (nil on create); next the spec after the write,
// normalised (defaults filled). A spec that does not normalise is left to the
// write itself, which reports it with its fields.
type specHooks[S any] struct {
	a      *API
	kind   *domain.KindInfo
	checks []func(ref domain.Ref, cur *domain.Object, next *S) []domain.Cause
	// deleteChecks run before a DELETE, with the stored object.
	deleteChecks []func(ref domain.Ref, cur *domain.Object) []domain.Cause
}

func (h *specHooks[S]) admit(_ echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error) {
	if op == domain.OpDelete {
		return nil, h.checkDelete(ref)
	}
	if op != domain.OpCreate && op != domain.OpUpdate {
		return nil, nil
	}
	if ref.Name == "" && obj != nil {
		ref.Name = obj.Metadata.Name // a create names the object in its body
	}
	return nil, h.check(ref, obj.Spec)
}

func (h *specHooks[S]) admitPatch(_ echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error) {
	merged, ok := h.a.patchedSpec(ref, patch)
	if !ok {
		return nil, nil
	}
	return nil, h.check(ref, merged)
}

// patchedSpec is the stored object's spec with a merge patch's spec applied,
// for hooks that check the spec a patch would store. ok is false when the
// patch leaves the spec alone, or when the object or the merge fails (the
// patch itself then answers NotFound or BadRequest).
func (a *API) patchedSpec(ref domain.Ref, patch map[string]any) (json.RawMessage, bool) {
	specPatch, ok := patch["spec"]
	if !ok {
		return nil, false
	}
	cur, found := a.cache.GetObject(ref)
	if !found {
		return nil, false
	}
	raw, err := json.Marshal(specPatch)
	if err != nil {
		return nil, false
	}
	merged, err := mergePatch(cur.Spec, raw)
	if err != nil {
		return nil, false
	}
	return merged, true
}

func (h *specHooks[S]) visible(echo.Context, []byte) bool { return true }

func (h *specHooks[S]) check(ref domain.Ref, raw json.RawMessage) error {
	norm, causes := h.kind.NormalizeSpec(raw)
	if len(causes) > 0 {
		return nil // the write reports them
	}
	var next S
	if json.Unmarshal(norm, &next) != nil {
		return nil
	}
	var cur *domain.Object
	if o, ok := h.a.cache.GetObject(ref); ok {
		cur = o
	}
	for _, c := range h.checks {
		causes = append(causes, c(ref, cur, &next)...)
	}
	if len(causes) > 0 {
		// The write is refused here: report its name too, so one answer names every field at fault.
		causes = append(domain.ValidateName(ref.Name, "metadata.name"), causes...)
		return domain.NewInvalid(h.kind.Kind, ref.Name, causes)
	}
	return nil
}

func (h *specHooks[S]) checkDelete(ref domain.Ref) error {
	cur, ok := h.a.cache.GetObject(ref)
	if !ok {
		return nil // the delete answers NotFound itself
	}
	var causes []domain.Cause
	for _, c := range h.deleteChecks {
		causes = append(causes, c(ref, cur)...)
	}
	if len(causes) > 0 {
		return domain.NewInvalid(h.kind.Kind, ref.Name, causes)
	}
	return nil
}

func (a *API) tenantHooks() kindHooks {
	return &specHooks[domain.TenantSpec]{a: a, kind: domain.TenantKind, checks: []func(domain.Ref, *domain.Object, *domain.TenantSpec) []domain.Cause{
		a.tenantVersionCauses,
		a.tenantProviderVersionCauses,
	}}
}

func (a *API) nodeGroupHooks() kindHooks {
	return &specHooks[domain.NodeGroupSpec]{a: a, kind: domain.NodeGroupKind, checks: []func(domain.Ref, *domain.Object, *domain.NodeGroupSpec) []domain.Cause{
		a.nodeGroupVersionCauses,
		a.nodeGroupScaleCauses,
		a.nodeGroupProviderCauses,
		a.nodeGroupProviderVersionCauses,
		a.nodeGroupAddressCauses,
		a.nodeGroupMetalAutoscalingCauses,
	}, deleteChecks: []func(domain.Ref, *domain.Object) []domain.Cause{
		a.nodeGroupDeleteCauses,
	}}
}

func (a *API) providerHooks() kindHooks {
	return &specHooks[domain.ProviderSpec]{a: a, kind: domain.ProviderKind, checks: []func(domain.Ref, *domain.Object, *domain.ProviderSpec) []domain.Cause{
		a.providerConfigCauses,
	}}
}
