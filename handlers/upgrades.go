package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// upgradeHooks let users create upgrades and cancel them. A new upgrade is
// checked with the run's own version rules (talos/versions.go) against the
// versions the tenant's machines were observed on and the Kubernetes version
// their configs carry (checkVersions); the saga checks again against what
// the nodes say when the run starts. Once created, the spec
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
	merged, ok := h.a.patchedSpec(ref, patch)
	if !ok {
		return nil, nil
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
// one the run would refuse at its start: a Talos target that machines
// observed on some version could not take in one step (or that does not run
// the Kubernetes version their configs carry), a Kubernetes target that goes
// back or skips a minor version from the one the configs carry, or that a
// machine's Talos version does not support (talos/versions.go), or that a
// Provider of the groups it covers does not run (its spec.versions). A
// Kubernetes upgrade covers every machine: the version is the tenant's.
func (h *upgradeHooks) checkVersions(tenant, name string, spec domain.UpgradeSpec) error {
	var causes []domain.Cause
	for i, ng := range spec.NodeGroups {
		if _, ok := h.a.cache.Get(domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: ng}); !ok {
			causes = append(causes, domain.Cause{Field: field.NewPath("spec", "nodeGroups").Index(i).String(), Type: domain.CauseInvalid,
				Message: fmt.Sprintf("node group %q does not exist in tenant %q", ng, tenant)})
		}
	}
	if spec.Kubernetes() && len(spec.NodeGroups) > 0 {
		causes = append(causes, domain.Cause{Field: "spec.nodeGroups", Type: domain.CauseForbidden,
			Message: "a Kubernetes upgrade covers every machine of the tenant (the Kubernetes version is the tenant's); leave nodeGroups out"})
	}
	t, ok, err := projections.Get[domain.Tenant](h.a.cache, domain.TenantRef(tenant))
	if err != nil {
		return err
	}
	if spec.Rotation() {
		if len(causes) > 0 {
			return domain.NewInvalid(domain.UpgradeKind.Kind, name, causes)
		}
		return nil
	}
	causes = append(causes, h.a.upgradeProviderVersionCauses(tenant, &spec)...)
	machines, _ := h.a.versionInputs(tenant)
	if ok && len(machines) > 0 {
		k8s := talos.KubernetesVersionOf(t)
		byVersion := map[string][]string{}
		for _, m := range machines {
			if spec.Includes(m.Spec.NodeGroup) && m.Status.TalosVersion != "" {
				byVersion[m.Status.TalosVersion] = append(byVersion[m.Status.TalosVersion], m.Metadata.Name)
			}
		}
		switch {
		case !spec.Kubernetes():
			causes = append(causes, machineVersionCauses("spec.talosVersion", "run", byVersion, func(v string) string {
				return talos.TalosUpgradeProblem(v, spec.TalosVersion, k8s)
			})...)
		case talos.KubernetesPathProblem(k8s, spec.KubernetesVersion) != "":
			causes = append(causes, domain.Cause{Field: "spec.kubernetesVersion", Type: domain.CauseInvalid,
				Message: "the machines' configs carry Kubernetes " + k8s + ": " + talos.KubernetesPathProblem(k8s, spec.KubernetesVersion)})
		default:
			causes = append(causes, machineVersionCauses("spec.kubernetesVersion", "run Talos", byVersion, func(v string) string {
				return talos.KubernetesSupportProblem(spec.KubernetesVersion, v)
			})...)
		}
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
