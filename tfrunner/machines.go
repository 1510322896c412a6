package tfrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// ManagedByLabel marks the machines the apply worker owns (projected from TF
// state); machines registered otherwise (bare metal) are never touched by it.
const ManagedByLabel = domain.LabelManagedBy

// managedByValue is the label's value on machines from TF state.
const managedByValue = domain.ManagedByTofu

// syncMachines makes the tenant's tofu-managed Machine objects match the
// state: new instances are created, existing ones get their spec refreshed,
// vanished ones are deleted. Status (stage, ready, version: observation) is
// never written here. The role comes from the node group.
func (w *Worker) syncMachines(ctx context.Context, tenant string, observed []ObservedMachine, logw *LogWriter) error {
	groups, err := projections.List[domain.NodeGroup](w.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return err
	}
	roles := map[string]string{}
	for _, g := range groups {
		roles[g.Metadata.Name] = g.Spec.Role
	}
	existing, err := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return err
	}
	current := map[string]domain.Machine{}
	for _, m := range existing {
		current[m.Metadata.Name] = m
	}
	slices.SortFunc(observed, func(a, b ObservedMachine) int { return strings.Compare(a.Name, b.Name) })
	seen := map[string]bool{}
	var created, updated, deleted int
	for _, o := range observed {
		seen[o.Name] = true
		role, ok := roles[o.NodeGroup]
		if !ok {
			if m, had := current[o.Name]; had {
				role = m.Spec.Role
			} else {
				logw.Printf("machine %s: node group %s is gone; not recorded", o.Name, o.NodeGroup)
				continue
			}
		}
		spec := domain.MachineSpec{NodeGroup: o.NodeGroup, Role: role, Address: o.Address,
			ProviderID: o.ProviderID, Shape: o.Shape, Hostname: o.Hostname}
		rawSpec, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		ref := domain.ObjectRef(domain.MachineKind, tenant, o.Name)
		if m, had := current[o.Name]; had {
			if m.Spec == spec && m.Metadata.Labels[ManagedByLabel] == managedByValue {
				continue
			}
			_, err := w.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5, Hint: w.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
				if state == nil {
					return nil, domain.NewNotFound(domain.MachineKind.Kind, o.Name)
				}
				next := state.DeepCopy()
				next.Spec = rawSpec
				if next.Metadata.Labels == nil {
					next.Metadata.Labels = map[string]string{}
				}
				next.Metadata.Labels[ManagedByLabel] = managedByValue
				return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next, Actor: WorkerActor, Now: w.cfg.Now()})
			})
			if err != nil {
				return fmt.Errorf("machine %s: %w", o.Name, err)
			}
			updated++
			continue
		}
		_, err = w.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(), NewUID: newUID(),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: o.Name, Tenant: tenant,
				Labels: map[string]string{ManagedByLabel: managedByValue, "rezuscloud.io/nodegroup": o.NodeGroup}}, Spec: rawSpec}},
			eventstore.UpdateOptions{})
		if err != nil && !domain.IsAlreadyExists(err) {
			return fmt.Errorf("machine %s: %w", o.Name, err)
		}
		created++
	}
	for _, m := range existing {
		if seen[m.Metadata.Name] || m.Metadata.Labels[ManagedByLabel] != managedByValue {
			continue
		}
		w.deleteObject(ctx, domain.ObjectRef(domain.MachineKind, tenant, m.Metadata.Name))
		deleted++
	}
	logw.Printf("machines: %d created, %d updated, %d deleted, %d in state", created, updated, deleted, len(observed))
	// The tenant's status counts machines from the read model: let it catch up.
	return w.cfg.Cache.Sync(ctx)
}
