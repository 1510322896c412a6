package upgrade

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// writeBack makes the declared state say what a Succeeded run left running,
// before the run is recorded Succeeded (so a restart in between does it
// again; every write is idempotent):
//
//   - a Kubernetes run sets the tenant's status.kubernetesVersion (what the
//     configs carry now) and, for a run a user created, spec.kubernetesVersion;
//   - a Talos run a user created sets spec.talosVersion where it covered it:
//     on the tenant when it covered every group that follows the tenant's
//     version, and on each covered group that overrides it (or, when it
//     covered only some of the groups that follow the tenant, on each of them).
//
// Runs the trigger started need no spec write: the spec declared their target
// before they began (or has moved on since, and then it is not overwritten).
// The versions the trigger remembers are written first, so these writes are
// not taken for version changes and start no run.
func (r *upgradeRun) writeBack(ctx context.Context) error {
	if r.spec.Rotation() {
		return r.writeBackRotation(ctx)
	}
	if r.spec.Kubernetes() {
		return r.writeBackKubernetes(ctx)
	}
	if !r.explicit {
		return nil
	}
	return r.writeBackTalos(ctx)
}

func (r *upgradeRun) writeBackKubernetes(ctx context.Context) error {
	to := r.spec.KubernetesVersion
	ref := domain.TenantRef(r.ref.Tenant)
	w := r.s.statusWriter()
	w.Hint = r.s.cfg.Cache
	_, err := eventstore.UpdateStatus(ctx, w, ref, func(_ *domain.Object, st *domain.TenantStatus) (bool, error) {
		if st.KubernetesVersion == to {
			return false, nil
		}
		st.KubernetesVersion = to
		return true, nil
	})
	if err != nil && !domain.IsNotFound(err) {
		return fmt.Errorf("recording the Kubernetes version of tenant %s: %w", r.ref.Tenant, err)
	}
	if !r.explicit {
		return nil
	}
	if err := r.remember(ctx, r.ref.Tenant+"."+kubernetesKey, to); err != nil {
		return err
	}
	return r.s.setSpecVersion(ctx, ref, "kubernetesVersion", to)
}

func (r *upgradeRun) writeBackTalos(ctx context.Context) error {
	to := r.spec.TalosVersion
	groups, err := projections.List[domain.NodeGroup](r.s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: r.ref.Tenant})
	if err != nil {
		return err
	}
	tenant, groupsToSet := talosWriteBack(groups, r.spec.Includes)
	var ts *domain.TenantSpec
	if t, ok, err := projections.Get[domain.Tenant](r.s.cfg.Cache, domain.TenantRef(r.ref.Tenant)); err == nil && ok {
		ts = &t.Spec
	}
	for _, ng := range groups {
		if ng.Metadata.DeletionTimestamp == nil && r.spec.Includes(ng.Metadata.Name) {
			if err := r.remember(ctx, r.ref.Tenant+"."+ng.Metadata.Name, declaredBuild(ts, &ng.Spec, to)); err != nil {
				return err
			}
		}
	}
	if tenant {
		if err := r.s.setSpecVersion(ctx, domain.TenantRef(r.ref.Tenant), "talosVersion", to); err != nil {
			return err
		}
	}
	for _, name := range groupsToSet {
		if err := r.s.setSpecVersion(ctx, domain.ObjectRef(domain.NodeGroupKind, r.ref.Tenant, name), "talosVersion", to); err != nil {
			return err
		}
	}
	return nil
}

// talosWriteBack decides where a Succeeded Talos run covering the groups
// covers says its version: on the tenant (when it covered every group that
// follows the tenant's talosVersion, and there is one) and on the named
// groups. Pure, table-tested.
func talosWriteBack(groups []domain.NodeGroup, covers func(string) bool) (tenant bool, nodeGroups []string) {
	following, allCovered := 0, true
	for _, ng := range groups {
		if ng.Metadata.DeletionTimestamp != nil || ng.Spec.TalosVersion != "" {
			continue
		}
		following++
		if !covers(ng.Metadata.Name) {
			allCovered = false
		}
	}
	tenant = following > 0 && allCovered
	for _, ng := range groups {
		if ng.Metadata.DeletionTimestamp != nil || !covers(ng.Metadata.Name) {
			continue
		}
		if ng.Spec.TalosVersion != "" || !tenant {
			nodeGroups = append(nodeGroups, ng.Metadata.Name)
		}
	}
	return tenant, nodeGroups
}

// remember records a version as the trigger's last declared one.
func (r *upgradeRun) remember(ctx context.Context, key, version string) error {
	if r.s.versions == nil {
		return nil
	}
	if _, err := r.s.versions.Put(ctx, key, []byte(version)); err != nil {
		return fmt.Errorf("remembering %s: %w", key, err)
	}
	return nil
}

// setSpecVersion sets one version field of an object's spec, as the saga;
// an object that is gone or going is left alone.
func (s *Saga) setSpecVersion(ctx context.Context, ref domain.Ref, field, version string) error {
	_, err := s.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 20}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil || state.Metadata.DeletionTimestamp != nil {
			return nil, nil
		}
		spec := map[string]json.RawMessage{}
		if len(state.Spec) > 0 {
			if err := json.Unmarshal(state.Spec, &spec); err != nil {
				return nil, fmt.Errorf("decoding the spec of %s: %w", ref, err)
			}
		}
		want := upgradeJSON(version)
		if string(spec[field]) == string(want) {
			return nil, nil
		}
		spec[field] = want
		obj := state.DeepCopy()
		obj.Spec = upgradeJSON(spec)
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: obj, Actor: Actor, Now: s.cfg.Now()})
	})
	if err != nil {
		return fmt.Errorf("writing spec.%s of %s: %w", field, ref, err)
	}
	s.cfg.Log.Info("upgrade wrote its version into the spec", "object", ref.String(), "field", "spec."+field, "version", version)
	return nil
}
