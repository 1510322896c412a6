package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos/upgrade"
)

// upgradeHooks let users create upgrades and cancel them. A new upgrade is
// checked against the versions the tenant's machines were observed on (no
// minor version skipped, none gone back across); the saga checks again
// against what the nodes say when the run starts. Once created, the spec
// cannot change except for setting spec.cancelRequested, and a running
// upgrade cannot be deleted until it has stopped.
type upgradeHooks struct{ a *API }

func (h *upgradeHooks) admit(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) (afterWrite, error) {
	switch op {
	case domain.OpCreate:
		spec, ok := upgradeSpecOf(obj.Spec)
		if !ok {
			return nil, nil // the normaliser reports it with the field
		}
		return nil, h.checkVersions(ref.Tenant, obj.Metadata.Name, spec)
	case domain.OpUpdate:
		return nil, h.checkChange(ref, obj.Spec)
	case domain.OpDelete:
		cur, ok := h.current(ref)
		if ok && cur.Status.Phase == domain.UpgradeRunning {
			return nil, domain.NewConflict(domain.UpgradeKind.Kind, ref.Name,
				fmt.Sprintf("the upgrade is running; cancel it (POST .../upgrades/%s/cancel) and delete it once it has stopped", ref.Name))
		}
	}
	return nil, nil
}

func (h *upgradeHooks) admitPatch(_ echo.Context, ref domain.Ref, patch map[string]any) (afterWrite, error) {
	specPatch, ok := patch["spec"]
	if !ok {
		return nil, nil
	}
	cur, found := h.a.cache.GetObject(ref)
	if !found {
		return nil, nil // the patch answers NotFound itself
	}
	raw, err := json.Marshal(specPatch)
	if err != nil {
		return nil, nil
	}
	merged, err := mergePatch(cur.Spec, raw)
	if err != nil {
		return nil, nil // the merge reports it
	}
	return nil, h.checkChange(ref, merged)
}

func (h *upgradeHooks) visible(echo.Context, []byte) bool { return true }

func upgradeSpecOf(raw json.RawMessage) (domain.UpgradeSpec, bool) {
	var spec domain.UpgradeSpec
	out, causes := domain.UpgradeKind.NormalizeSpec(raw)
	if len(causes) > 0 || json.Unmarshal(out, &spec) != nil {
		return spec, false
	}
	return spec, true
}

func (h *upgradeHooks) current(ref domain.Ref) (domain.Upgrade, bool) {
	u, ok, err := projections.Get[domain.Upgrade](h.a.cache, ref)
	if !ok || err != nil {
		return domain.Upgrade{}, false
	}
	return *u, true
}

// checkChange allows an update that leaves the spec as it is or only sets
// spec.cancelRequested on a run that has not finished.
func (h *upgradeHooks) checkChange(ref domain.Ref, raw json.RawMessage) error {
	cur, ok := h.current(ref)
	if !ok {
		return nil // the update answers NotFound itself
	}
	next, ok := upgradeSpecOf(raw)
	if !ok {
		return nil
	}
	if cur.Spec.CancelRequested && !next.CancelRequested {
		return domain.NewInvalid(domain.UpgradeKind.Kind, ref.Name, []domain.Cause{{Field: "spec.cancelRequested", Type: domain.CauseForbidden,
			Message: "a cancel request cannot be taken back"}})
	}
	was := cur.Spec
	was.CancelRequested = next.CancelRequested
	a, _ := json.Marshal(was)
	b, _ := json.Marshal(next)
	if string(a) != string(b) {
		return domain.NewInvalid(domain.UpgradeKind.Kind, ref.Name, []domain.Cause{{Field: "spec", Type: domain.CauseForbidden,
			Message: "an upgrade's spec cannot change once it is created (only spec.cancelRequested can be set); create another upgrade"}})
	}
	if next.CancelRequested && !cur.Spec.CancelRequested && cur.Status.Final() {
		return domain.NewConflict(domain.UpgradeKind.Kind, ref.Name, fmt.Sprintf("the upgrade has already finished (%s)", cur.Status.Phase))
	}
	return nil
}

// checkVersions refuses an upgrade naming node groups the tenant lacks, or
// one that machines observed on some version could not take in one step.
func (h *upgradeHooks) checkVersions(tenant, name string, spec domain.UpgradeSpec) error {
	var causes []domain.Cause
	for i, ng := range spec.NodeGroups {
		if _, ok := h.a.cache.Get(domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: ng}); !ok {
			causes = append(causes, domain.Cause{Field: fmt.Sprintf("spec.nodeGroups[%d]", i), Type: domain.CauseInvalid,
				Message: fmt.Sprintf("node group %q does not exist in tenant %q", ng, tenant)})
		}
	}
	res, err := h.a.cache.List(domain.MachineKind.Kind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return err
	}
	byVersion := map[string][]string{}
	for _, raw := range res.Items {
		var m domain.Machine
		if json.Unmarshal(raw, &m) != nil || !spec.Includes(m.Spec.NodeGroup) || m.Status.TalosVersion == "" {
			continue
		}
		byVersion[m.Status.TalosVersion] = append(byVersion[m.Status.TalosVersion], m.Metadata.Name)
	}
	versions := make([]string, 0, len(byVersion))
	for v := range byVersion {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	for _, v := range versions {
		p := domain.UpgradePathProblem(v, spec.TalosVersion)
		if p == "" {
			continue
		}
		ms := byVersion[v]
		sort.Strings(ms)
		if len(ms) > 5 {
			ms = append(append([]string(nil), ms[:5]...), fmt.Sprintf("and %d more", len(ms)-5))
		}
		causes = append(causes, domain.Cause{Field: "spec.talosVersion", Type: domain.CauseInvalid,
			Message: fmt.Sprintf("machines %s run %s: %s", strings.Join(ms, ", "), v, p)})
	}
	if len(causes) > 0 {
		return domain.NewInvalid(domain.UpgradeKind.Kind, name, causes)
	}
	return nil
}

func (a *API) upgradeRoutes(g *authed) {
	g.POST("/tenants/:tenant/upgrades/:name/cancel", a.cancelUpgrade)
}

// cancelUpgrade records a cancel request: the saga stops the run after the
// machine it is upgrading (a run still Pending ends without starting).
func (a *API) cancelUpgrade(c echo.Context) error {
	ref := domain.Ref{Kind: domain.UpgradeKind.Kind, Tenant: c.Param("tenant"), Name: c.Param("name")}
	if causes := append(domain.ValidateName(ref.Tenant, "metadata.tenant"), domain.ValidateName(ref.Name, "metadata.name")...); causes != nil {
		return domain.NewBadRequest("invalid name in the URL", causes...)
	}
	auditObject(c, ref)
	ctx := c.Request().Context()
	res, err := upgrade.Cancel(ctx, a.store, upgrade.CancelRequest{Tenant: ref.Tenant, Name: ref.Name,
		Actor: identityOf(c).Name, CorrelationID: correlationID(c), Now: a.cfg.Now()})
	if err != nil {
		return err
	}
	if res.Seq > 0 {
		wctx, cancel := context.WithTimeout(ctx, a.cfg.ReadAfterWriteTimeout)
		_ = a.cache.WaitFor(wctx, res.Seq)
		cancel()
	}
	return c.JSON(http.StatusAccepted, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Success",
		"message": fmt.Sprintf("upgrade %s stops after the machine it is upgrading", ref.Name), "code": http.StatusAccepted,
		"details": map[string]any{"name": ref.Name, "kind": domain.UpgradeKind.Plural}})
}
