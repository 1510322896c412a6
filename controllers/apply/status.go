package apply

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/tofu"
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

// applyRecord is a run's Apply status while it runs: the run's goroutine and
// tofu's output (through the phase setter) both move it.
type applyRecord struct {
	w            *Worker
	tenant, name string

	mu     sync.Mutex
	status domain.ApplyStatus
}

// newApplyRecord starts the record of a run (phase Planning) and writes it.
func (w *Worker) newApplyRecord(ctx context.Context, tenant, name string, attempt int) *applyRecord {
	start := w.cfg.Now().UTC()
	r := &applyRecord{w: w, tenant: tenant, name: name,
		status: domain.ApplyStatus{Phase: domain.ApplyPlanning, StartTime: &start, Attempt: attempt,
			Replica: w.cfg.Holder, Holder: w.cfg.Holder}}
	w.writeApplyStatus(ctx, tenant, name, r.status)
	return r
}

// phaseSetter moves the record to a phase, writing it only when it changes
// (tofu reports the start of every resource change).
func (r *applyRecord) phaseSetter(ctx context.Context) func(string) {
	return func(phase string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.status.Phase != phase {
			r.status.Phase = phase
			r.w.writeApplyStatus(ctx, r.tenant, r.name, r.status)
		}
	}
}

// finish completes the record with how the run ended, notes it in the run's
// log, and returns the final status (for the caller to write) and how long
// the run took.
func (r *applyRecord) finish(end runEnd, err error, res runResult, operation string, logw *tofu.LogWriter) (domain.ApplyStatus, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.status
	endTime := r.w.cfg.Now().UTC()
	took := endTime.Sub(*st.StartTime).Round(time.Millisecond)
	st.EndTime, st.Resources = &endTime, res.resources
	st.TofuMilliseconds = res.tofu.Milliseconds()
	switch end {
	case endSucceeded:
		st.Phase = domain.ApplySucceeded
		logw.Printf("%s succeeded in %s: %d added, %d changed, %d destroyed", operation,
			took, res.resources.Added, res.resources.Changed, res.resources.Destroyed)
	case endCanceled:
		st.Phase, st.Error = domain.ApplyCanceled, "canceled by a user"
		logw.Printf("canceled by a user")
	case endInterrupted:
		st.Phase, st.Error = domain.ApplyFailed, "interrupted: the server stopped or lost the worker lease; the tenant stays queued"
		logw.Printf("interrupted: %v", err)
	default:
		st.Phase, st.Error = domain.ApplyFailed, domain.Truncate(err.Error(), domain.MaxApplyErrorBytes)
		logw.Printf("%s failed: %v", operation, err)
	}
	return *st, took
}

// tenantRunning is the tenant's status while a run of it goes.
func tenantRunning(s *domain.TenantStatus, destroy bool, apply string, generation int64, now time.Time) {
	s.Phase = "Provisioning"
	if destroy {
		s.Phase = "Deleting"
	}
	setCondition(s, domain.Condition{Type: "Reconciled", Status: "Unknown", Reason: "Applying",
		Message: "apply " + apply + " is running", ObservedGeneration: generation}, now)
}

// tenantAfterRun is the tenant's status after a run that did not finish a
// deletion (a successful destroy removes the tenant's finalizer instead).
// errMsg is the failed run's recorded error.
func tenantAfterRun(s *domain.TenantStatus, end runEnd, destroy bool, apply string, generation int64, endpoint, errMsg string, now time.Time) {
	switch end {
	case endSucceeded:
		s.Phase = "Ready"
		s.ObservedGeneration = generation
		s.EndpointAddress = endpoint
		setCondition(s, domain.Condition{Type: "Reconciled", Status: "True", Reason: "ApplySucceeded",
			Message: "apply " + apply + " succeeded", ObservedGeneration: generation}, now)
	case endCanceled:
		setCondition(s, domain.Condition{Type: "Reconciled", Status: "False", Reason: "ApplyCanceled",
			Message: "apply " + apply + " was canceled", ObservedGeneration: generation}, now)
	default:
		s.Phase = "Failed"
		if destroy {
			s.Phase = "Deleting"
		}
		setCondition(s, domain.Condition{Type: "Reconciled", Status: "False", Reason: "ApplyFailed",
			Message: domain.Truncate(errMsg, 1024), ObservedGeneration: generation}, now)
	}
}

// kubernetesVersionAfterRun records, after the first successful apply, the
// Kubernetes version the machines' configs were rendered with (rendered:
// talos.KubernetesVersionOf the tenant the run read). From then on only a
// successful Kubernetes upgrade run moves it (controllers/upgrade), so a change of
// spec.kubernetesVersion reaches running machines through that run alone.
func kubernetesVersionAfterRun(s *domain.TenantStatus, end runEnd, destroy bool, rendered string) {
	if end == endSucceeded && !destroy && s.KubernetesVersion == "" {
		s.KubernetesVersion = rendered
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
	s.Conditions = domain.SetCondition(s.Conditions, c, now)
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

func newUID() string { return uuid.NewString() }
