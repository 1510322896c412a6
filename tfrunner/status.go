package tfrunner

import (
	"context"
	"encoding/json"
	"slices"
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
		ref := domain.ObjectRef(domain.ApplyKind, tenant, name)
		_, err := w.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(),
			NewUID: newUID(), Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: raw}},
			eventstore.UpdateOptions{})
		if domain.IsAlreadyExists(err) && i < 10 {
			continue
		}
		return name, err
	}
}

// statusWriter is how the worker writes statuses: as WorkerActor (so its own
// writes queue nothing), deciding on the read model first.
func (w *Worker) statusWriter() eventstore.StatusWriter {
	return eventstore.StatusWriter{Store: w.cfg.Store, Actor: WorkerActor, Now: w.cfg.Now, Hint: w.cfg.Cache}
}

// writeApplyStatus records an apply's status as the run sees it; the run is
// its only writer, so the whole status is replaced.
func (w *Worker) writeApplyStatus(ctx context.Context, tenant, name string, st domain.ApplyStatus) {
	_, err := eventstore.UpdateStatus(ctx, w.statusWriter(), domain.ObjectRef(domain.ApplyKind, tenant, name),
		func(_ *domain.Object, s *domain.ApplyStatus) (bool, error) {
			*s = st
			return true, nil
		})
	if err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: writing apply status", "tenant", tenant, "apply", name, "err", err)
	}
}

// updateTenantStatus rewrites the tenant's status through mutate.
func (w *Worker) updateTenantStatus(ctx context.Context, tenant string, mutate func(s *domain.TenantStatus, generation int64)) {
	updateStatus(ctx, w, domain.TenantRef(tenant), mutate)
}

// updateStatus rewrites an object's status (of type S) through mutate, which
// also gets the object's generation; a missing object is left alone (a run
// outliving what it reports on is no error), other failures are logged: a
// status is rewritten by the next run.
func updateStatus[S any](ctx context.Context, w *Worker, ref domain.Ref, mutate func(s *S, generation int64)) {
	_, err := eventstore.UpdateStatus(ctx, w.statusWriter(), ref, func(obj *domain.Object, s *S) (bool, error) {
		mutate(s, obj.Metadata.Generation)
		return true, nil
	})
	if err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: writing status", "object", ref.String(), "err", err)
	}
}

// setCondition sets a condition, keeping its transition time unless its status changed.
func setCondition(s *domain.TenantStatus, c domain.Condition, now time.Time) {
	c.LastTransitionTime = now.UTC().Truncate(time.Second)
	i := slices.IndexFunc(s.Conditions, func(old domain.Condition) bool { return old.Type == c.Type })
	if i < 0 {
		s.Conditions = append(s.Conditions, c)
		return
	}
	if s.Conditions[i].Status == c.Status {
		c.LastTransitionTime = s.Conditions[i].LastTransitionTime
	}
	s.Conditions[i] = c
}

func (w *Worker) machineCounts(tenant string) domain.MachineCounts {
	var c domain.MachineCounts
	ms, _ := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
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
	as, err := projections.List[domain.Apply](w.cfg.Cache, domain.ApplyKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return
	}
	done := slices.DeleteFunc(as, func(a domain.Apply) bool { return !a.Status.Final() })
	if len(done) <= w.cfg.KeepApplies {
		return
	}
	slices.SortFunc(done, func(a, b domain.Apply) int {
		return a.Metadata.CreationTimestamp.Compare(*b.Metadata.CreationTimestamp)
	})
	for _, a := range done[:len(done)-w.cfg.KeepApplies] {
		w.deleteObject(ctx, domain.ObjectRef(domain.ApplyKind, tenant, a.Metadata.Name))
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func newUID() string { return uuid.NewString() }
