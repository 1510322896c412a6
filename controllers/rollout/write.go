package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// upgradeName names a tenant's Upgrade of a rollout's attempt: the
// rollout's name, then "-<attempt>" from the second attempt on.
func upgradeName(rollout string, attempt int) string {
	if attempt <= 1 {
		return rollout
	}
	suffix := "-" + strconv.Itoa(attempt)
	if len(rollout)+len(suffix) > 63 {
		rollout = rollout[:63-len(suffix)]
	}
	return rollout + suffix
}

// write writes a running tenant's change: its Upgrade (created once under
// its name; a rotation is an Upgrade with spec.rotate) or the ConfigPatch
// (created, or its spec set).
func (c *Controller) write(ctx context.Context, ro *domain.Rollout, t domain.RolloutTenantStatus) error {
	labels := map[string]string{domain.LabelRollout: ro.Metadata.Name}
	now := c.cfg.Clock.Now()
	if p := ro.Spec.Change.ConfigPatch; p != nil {
		spec, err := json.Marshal(p.Spec)
		if err != nil {
			return err
		}
		ref := domain.ObjectRef(domain.ConfigPatchKind, t.Name, p.Name)
		_, err = c.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Hint: c.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
			if state == nil {
				return domain.Decide(nil, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: Actor, Now: now, NewUID: uuid.NewString(),
					Object: &domain.Object{Metadata: domain.ObjectMeta{Name: p.Name, Tenant: t.Name, Labels: labels}, Spec: spec}})
			}
			obj := state.DeepCopy()
			obj.Spec = spec
			if obj.Metadata.Labels == nil {
				obj.Metadata.Labels = map[string]string{}
			}
			obj.Metadata.Labels[domain.LabelRollout] = ro.Metadata.Name
			return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Actor: Actor, Now: now, Object: obj})
		})
		if err != nil {
			return fmt.Errorf("writing config patch %s of tenant %s: %w", p.Name, t.Name, err)
		}
		return nil
	}
	name := upgradeName(ro.Metadata.Name, t.Attempt)
	ch := ro.Spec.Change
	spec, err := json.Marshal(domain.UpgradeSpec{TalosVersion: ch.TalosVersion, KubernetesVersion: ch.KubernetesVersion, Rotate: ch.Rotate, MaxParallelism: 1})
	if err != nil {
		return err
	}
	ref := domain.ObjectRef(domain.UpgradeKind, t.Name, name)
	_, err = c.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Hint: c.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		if state != nil {
			return nil, nil
		}
		return domain.Decide(nil, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: Actor, Now: now, NewUID: uuid.NewString(),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: t.Name, Labels: labels}, Spec: spec}})
	})
	if err != nil {
		return fmt.Errorf("creating upgrade %s of tenant %s: %w", name, t.Name, err)
	}
	return nil
}

// cancel asks a tenant's running Upgrade of the rollout to stop after the
// machine it is on (an abort); a config patch written stays.
func (c *Controller) cancel(ctx context.Context, ro *domain.Rollout, tenant string, attempt int) error {
	if ro.Spec.Change.ConfigPatch != nil {
		return nil
	}
	ref := domain.ObjectRef(domain.UpgradeKind, tenant, upgradeName(ro.Metadata.Name, attempt))
	_, err := c.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Hint: c.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, nil
		}
		var spec domain.UpgradeSpec
		if err := json.Unmarshal(state.Spec, &spec); err != nil {
			return nil, err
		}
		if spec.CancelRequested {
			return nil, nil
		}
		spec.CancelRequested = true
		obj := state.DeepCopy()
		obj.Spec, _ = json.Marshal(spec)
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Actor: Actor, Now: c.cfg.Clock.Now(), Object: obj})
	})
	return err
}

// samePatch reports whether a stored patch's spec is the rollout's.
func samePatch(a, b *domain.ConfigPatchSpec) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
