package tfrunner

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

func (w *Worker) createApply(ctx context.Context, tenant string, spec domain.ApplySpec) (string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	for i := 0; ; i++ {
		name := spec.Operation + "-" + strconv.FormatInt(w.cfg.Now().UnixMilli()+int64(i), 10)
		ref := domain.Ref{Kind: domain.ApplyKind.Kind, Tenant: tenant, Name: name}
		_, err := w.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(),
			NewUID: newUID(), Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: raw}},
			eventstore.UpdateOptions{})
		if domain.IsAlreadyExists(err) && i < 10 {
			continue
		}
		return name, err
	}
}

func (w *Worker) writeApplyStatus(ctx context.Context, tenant, name string, st domain.ApplyStatus) {
	raw, err := json.Marshal(st)
	if err != nil {
		return
	}
	ref := domain.Ref{Kind: domain.ApplyKind.Kind, Tenant: tenant, Name: name}
	if _, err := w.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(),
		Object: &domain.Object{Status: raw}}, eventstore.UpdateOptions{Retries: 5, Hint: w.cfg.Cache}); err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: writing apply status", "tenant", tenant, "apply", name, "err", err)
	}
}

// updateTenantStatus rewrites the tenant's status through mutate.
func (w *Worker) updateTenantStatus(ctx context.Context, tenant string, mutate func(s *domain.TenantStatus, generation int64)) {
	updateStatus(ctx, w, domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant}, mutate)
}

// updateStatus rewrites an object's status (of type S) through mutate, which
// also gets the object's generation; a missing object is left alone.
func updateStatus[S any](ctx context.Context, w *Worker, ref domain.Ref, mutate func(s *S, generation int64)) {
	_, err := w.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5, Hint: w.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, nil
		}
		var s S
		if len(state.Status) > 0 {
			if err := json.Unmarshal(state.Status, &s); err != nil {
				return nil, err
			}
		}
		mutate(&s, state.Metadata.Generation)
		raw, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		return domain.Decide(state, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(),
			Object: &domain.Object{Status: raw}})
	})
	if err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: writing status", "object", ref.String(), "err", err)
	}
}

// setCondition sets a condition, keeping its transition time unless its status changed.
func setCondition(s *domain.TenantStatus, c domain.Condition, now time.Time) {
	c.LastTransitionTime = now.UTC().Truncate(time.Second)
	for i, old := range s.Conditions {
		if old.Type == c.Type {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			s.Conditions[i] = c
			return
		}
	}
	s.Conditions = append(s.Conditions, c)
}

func (w *Worker) machineCounts(tenant string) domain.MachineCounts {
	var c domain.MachineCounts
	ms, _ := listAs[domain.Machine](w.cfg.Cache, domain.MachineKind.Kind, tenant)
	for _, m := range ms {
		c.Total++
		if m.Status.Ready {
			c.Ready++
		}
		if m.Spec.Role == domain.RoleControlPlane {
			c.ControlPlane++
		} else {
			c.Workers++
		}
	}
	return c
}

// prune keeps the newest KeepApplies finished applies of a tenant (and their logs).
func (w *Worker) prune(ctx context.Context, tenant string) {
	as, err := listAs[domain.Apply](w.cfg.Cache, domain.ApplyKind.Kind, tenant)
	if err != nil {
		return
	}
	var done []domain.Apply
	for _, a := range as {
		if a.Status.Final() {
			done = append(done, a)
		}
	}
	if len(done) <= w.cfg.KeepApplies {
		return
	}
	sort.Slice(done, func(i, j int) bool {
		return done[i].Metadata.CreationTimestamp.Before(*done[j].Metadata.CreationTimestamp)
	})
	for _, a := range done[:len(done)-w.cfg.KeepApplies] {
		w.deleteObject(ctx, domain.Ref{Kind: domain.ApplyKind.Kind, Tenant: tenant, Name: a.Metadata.Name})
		if err := w.cfg.Logs.Delete(ctx, tenant, a.Metadata.Name); err != nil {
			w.cfg.Log.Warn("apply worker: deleting an old log", "tenant", tenant, "apply", a.Metadata.Name, "err", err)
		}
	}
}

func (w *Worker) deleteObject(ctx context.Context, ref domain.Ref) {
	_, err := w.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpDelete, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now()},
		eventstore.UpdateOptions{Retries: 3, Hint: w.cfg.Cache})
	if err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: deleting", "object", ref.String(), "err", err)
	}
}

func decodeAs[T any](o *domain.Object) (*T, error) {
	raw, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func listAs[T any](cache *projections.Cache, kind, tenant string) ([]T, error) {
	res, err := cache.List(kind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(res.Items))
	for _, raw := range res.Items {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func newUID() string { return uuid.NewString() }
