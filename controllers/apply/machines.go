package apply

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// ManagedByLabel marks the machines the apply worker owns (projected from TF
// state); machines registered otherwise (bare metal) are never touched by it.
const ManagedByLabel = domain.LabelManagedBy

// managedByValue is the label's value on machines from TF state.
const managedByValue = domain.ManagedByTofu

// syncMachines makes the tenant's tofu-managed Machine objects match the
// state: new instances are created, existing ones get their spec refreshed,
// vanished ones are deleted. Status (stage, ready, version: observation) is
// never written here, except a new machine's config: it booted with its
// day-0 config (day0, by machine name: the bytes its user data held), whose
// hash it is created with (domain.AnnotationConfigHash) and recorded as
// ConfigApplied=True reason Day0; from then on the config controller
// (controllers/configsync) owns its config. The role comes from the node group.
func (w *Worker) syncMachines(ctx context.Context, tenant string, observed []providers.ObservedMachine, day0 map[string][]byte, logw *tofu.LogWriter) ([]machineKey, error) {
	groups, err := projections.List[domain.NodeGroup](w.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	roles := map[string]string{}
	for _, g := range groups {
		roles[g.Metadata.Name] = g.Spec.Role
	}
	existing, err := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	current := map[string]domain.Machine{}
	for _, m := range existing {
		current[m.Metadata.Name] = m
	}
	slices.SortFunc(observed, func(a, b providers.ObservedMachine) int { return strings.Compare(a.Name, b.Name) })
	seen := map[string]bool{}
	var created, updated, deleted int
	var recorded []machineKey
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
		recorded = append(recorded, observedKeys([]providers.ObservedMachine{o})...)
		rawSpec, err := json.Marshal(spec)
		if err != nil {
			return nil, err
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
				return nil, fmt.Errorf("machine %s: %w", o.Name, err)
			}
			updated++
			continue
		}
		meta := domain.ObjectMeta{Name: o.Name, Tenant: tenant,
			Labels: map[string]string{ManagedByLabel: managedByValue, "rezuscloud.io/nodegroup": o.NodeGroup}}
		cfg, known := day0[o.Name]
		hash := ""
		if known {
			hash = talos.ConfigHash(cfg)
			meta.Annotations = map[string]string{domain.AnnotationConfigHash: hash}
		}
		_, err = w.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(), NewUID: newUID(),
			Object: &domain.Object{Metadata: meta, Spec: rawSpec}},
			eventstore.UpdateOptions{})
		if err != nil && !domain.IsAlreadyExists(err) {
			return nil, fmt.Errorf("machine %s: %w", o.Name, err)
		}
		if err == nil && known {
			if err := w.configRecorder().Applied(ctx, ref, hash, talos.ReasonDay0, "booted with its config as user data"); err != nil {
				return nil, err
			}
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
	return recorded, w.cfg.Cache.Sync(ctx)
}

// configRecorder records machine configs as the worker.
func (w *Worker) configRecorder() talos.ConfigRecorder {
	return talos.ConfigRecorder{Store: w.cfg.Store, Actor: WorkerActor, Now: w.cfg.Now, Hint: w.cfg.Cache}
}

// day0Configs are the configs a run's new machines boot with, by machine
// name: the rendered configs, with the endpoint placeholder replaced by the
// endpoint address tofu made, as the generated user data does. Without that
// address a placeholder config's bytes are not known: it is left out.
func day0Configs(in providers.GenerateInput, endpoint string) map[string][]byte {
	out := map[string][]byte{}
	for _, g := range in.Groups {
		for _, m := range g.Machines {
			switch {
			case !in.PlaceholderEndpoint:
				out[m.Name] = m.Config
			case endpoint != "":
				out[m.Name] = bytes.ReplaceAll(m.Config, []byte(providers.EndpointPlaceholder), []byte(endpoint))
			}
		}
	}
	return out
}
