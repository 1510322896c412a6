package apply

import (
	"context"
	"os"
	"path/filepath"
	"slices"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// forget drops what a tenant that is gone left behind.
func (w *Worker) forget(ctx context.Context, tenant string) {
	if err := w.cfg.State.DeleteState(ctx, tenant); err != nil {
		w.cfg.Log.Warn("apply worker: deleting the state of a gone tenant", "tenant", tenant, "err", err)
	} else if w.cfg.StateKeys != nil {
		// The key goes with the state it encrypted, not before.
		if err := w.cfg.StateKeys.DeleteStateKey(ctx, tenant); err != nil {
			w.cfg.Log.Warn("apply worker: deleting the state key of a gone tenant", "tenant", tenant, "err", err)
		}
	}
	_ = os.RemoveAll(filepath.Join(w.cfg.WorkDir, "tenants", tenant))
}

// finishDestroy removes the tenant's machines, state and work dir, and then
// its infrastructure finalizer, so the tenant finalizer can delete it.
func (w *Worker) finishDestroy(ctx context.Context, tenant string) {
	ms, _ := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	for _, m := range ms {
		w.deleteObject(ctx, domain.ObjectRef(domain.MachineKind, tenant, m.Metadata.Name))
	}
	w.forget(ctx, tenant)
	ref := domain.TenantRef(tenant)
	_, err := w.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil || !slices.Contains(state.Metadata.Finalizers, InfraFinalizer) {
			return nil, nil
		}
		next := state.DeepCopy()
		next.Metadata.Finalizers = slices.DeleteFunc(next.Metadata.Finalizers, func(f string) bool { return f == InfraFinalizer })
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next, Actor: WorkerActor,
			Now: w.cfg.Now(), Dependents: len(w.cfg.Cache.Children(tenant))})
	})
	if err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: removing the infrastructure finalizer", "tenant", tenant, "err", err)
	}
}

// ensureFinalizer puts the infrastructure finalizer on a tenant before its
// first apply, so deleting the tenant waits for `tofu destroy`.
func (w *Worker) ensureFinalizer(ctx context.Context, tenant string) error {
	ref := domain.TenantRef(tenant)
	_, err := w.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5, Hint: w.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, domain.NewNotFound(domain.TenantKind.Kind, tenant)
		}
		if slices.Contains(state.Metadata.Finalizers, InfraFinalizer) {
			return nil, nil
		}
		next := state.DeepCopy()
		next.Metadata.Finalizers = append(next.Metadata.Finalizers, InfraFinalizer)
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next, Actor: WorkerActor, Now: w.cfg.Now()})
	})
	return err
}
