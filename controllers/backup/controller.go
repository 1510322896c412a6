package backup

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Controller is the etcd backup controller; New builds it, Run runs it.
type Controller struct {
	controller.Base
	cfg Config
	sw  eventstore.StatusWriter
}

// New returns the controller of cfg (see Config.Validate); Run starts it.
// Every tenant with work (backups and restores not over, backups being
// deleted, schedules with a backup due) is queued when this replica leads
// and at each resync.
func New(cfg Config) *Controller {
	cfg.setDefaults()
	c := &Controller{cfg: cfg}
	c.sw = eventstore.StatusWriter{Store: cfg.Store, Actor: Actor, Now: cfg.Clock.Now, Hint: cfg.Cache}
	c.Base = controller.Build(controller.Spec{
		Store: cfg.Store, Holder: cfg.Holder, Tenants: cfg.Tenants, Name: "etcd backup controller",
		Lease: Lease, Consumer: Consumer, Queue: Queue, Description: "tenants with etcd backup or restore work",
		Kinds:       []*domain.KindInfo{domain.TenantKind, domain.EtcdBackupKind, domain.RestoreKind},
		Concurrency: cfg.Concurrency, Backoff: controller.Exponential(cfg.BackoffBase, cfg.BackoffMax),
		Resync: cfg.Resync, Clock: cfg.Clock, Log: cfg.Log,
		ReadModel: cfg.Cache, Pending: func(context.Context) ([]string, error) { return c.tenantsWithWork() },
	}, runtimeController{c})
	return c
}

// runtimeController is the controller as the runtime drives it: keys are tenants.
type runtimeController struct{ c *Controller }

// Lead purges what a put killed mid-way left in the bucket (no put runs
// before Lead returns).
func (r runtimeController) Lead(ctx context.Context, _ *controller.Queue) (func(), error) {
	c := r.c
	if n, err := c.cfg.Backups.SweepPartial(ctx, c.cfg.PartialQuiet); err != nil {
		c.cfg.Log.Warn("sweeping partial backup objects", "err", err)
	} else if n > 0 {
		c.cfg.Log.Info("swept partial backup objects", "subjects", n)
	}
	return nil, nil
}

// tenantsWithWork lists the tenants with a scheduled backup due (its slot's
// backup does not exist: one lookup per tenant) or with backups and
// restores that wait.
func (c *Controller) tenantsWithWork() ([]string, error) {
	now := c.cfg.Clock.Now()
	tenants, err := projections.List[domain.Tenant](c.cfg.Cache, domain.TenantKind, projections.ListOptions{})
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for i := range tenants {
		t := &tenants[i]
		if !c.hasMachines(t.Metadata.Name) {
			continue // nothing to back up yet (see Reconcile)
		}
		if slot, ok := dueSlot(t, now); ok {
			if _, exists := c.cfg.Cache.Get(domain.ObjectRef(domain.EtcdBackupKind, t.Metadata.Name, domain.ScheduledBackupName(slot))); !exists {
				set[t.Metadata.Name] = true
			}
		}
	}
	backups, err := projections.List[domain.EtcdBackup](c.cfg.Cache, domain.EtcdBackupKind, projections.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range backups {
		if !b.Status.Final() || b.Metadata.DeletionTimestamp != nil {
			set[b.Metadata.Tenant] = true
		}
	}
	restores, err := projections.List[domain.Restore](c.cfg.Cache, domain.RestoreKind, projections.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, rs := range restores {
		if !rs.Status.Final() {
			set[rs.Metadata.Tenant] = true
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// Keys maps an event to the tenant with work, once the read model has it:
// a backup or restore created or being deleted, a tenant whose schedule may
// have changed. The controller's own writes queue nothing.
func (r runtimeController) Keys(ctx context.Context, ev *domain.Event, seq uint64) ([]string, error) {
	keys := keysOf(ev)
	if len(keys) == 0 {
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.c.cfg.Cache.WaitFor(wctx, seq); err != nil {
		return nil, err
	}
	return keys, nil
}

func keysOf(ev *domain.Event) []string {
	if ev.Actor == Actor || ev.Object == nil {
		return nil
	}
	o := ev.Object
	status := strings.HasSuffix(ev.Type, "StatusUpdated")
	switch o.Kind {
	case domain.TenantKind.Kind:
		if ev.Action == domain.ActionDeleted {
			return []string{o.Metadata.Name} // its backup key goes
		}
		if status {
			return nil
		}
		var spec domain.TenantSpec
		if json.Unmarshal(o.Spec, &spec) != nil || !spec.EtcdBackup.Enabled() {
			return nil
		}
		return []string{o.Metadata.Name}
	case domain.EtcdBackupKind.Kind, domain.RestoreKind.Kind:
		if status || ev.Action == domain.ActionDeleted {
			return nil
		}
		return []string{o.Metadata.Tenant}
	}
	return nil
}

// Due runs a tenant as soon as it is queued.
func (runtimeController) Due(_ string, e controller.Entry) time.Time { return e.Last }

// Reconcile does the tenant's backup work, in this order: deletes the
// objects of backups being deleted, runs a restore (then nothing else: the
// rest waits for it), takes the pending backups, creates the scheduled
// backup due and takes it, and retires what retention lets go.
func (r runtimeController) Reconcile(ctx context.Context, tenant string, _ controller.Entry, _ int) controller.Result {
	c := r.c
	log := c.cfg.Log.With("tenant", tenant)
	backups, err := projections.List[domain.EtcdBackup](c.cfg.Cache, domain.EtcdBackupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		log.Warn("listing backups", "err", err)
		return controller.Retry()
	}
	failed := false
	for _, b := range backups {
		if b.Metadata.DeletionTimestamp != nil {
			if err := c.finalize(ctx, b); err != nil {
				log.Warn("deleting a backup's object", "backup", b.Metadata.Name, "err", err)
				failed = true
			}
		}
	}
	restores, err := projections.List[domain.Restore](c.cfg.Cache, domain.RestoreKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		log.Warn("listing restores", "err", err)
		return controller.Retry()
	}
	if rs, ok := nextRestore(restores); ok {
		if err := c.restore(ctx, rs); err != nil {
			log.Warn("restore", "restore", rs.Metadata.Name, "err", err)
			return controller.Retry()
		}
		return controller.Done()
	}
	for _, b := range pendingBackups(backups) {
		if err := c.take(ctx, b); err != nil {
			log.Warn("backup", "backup", b.Metadata.Name, "err", err)
			return controller.Retry()
		}
	}
	t, _, err := projections.Get[domain.Tenant](c.cfg.Cache, domain.TenantRef(tenant))
	if err != nil {
		return controller.Retry()
	}
	if t == nil && len(backups) == 0 {
		// The tenant is gone and its backups with it (it goes only once its
		// objects have): so does the key that sealed them.
		if err := c.cfg.Backups.DeleteKey(ctx, tenant); err != nil {
			log.Warn("deleting the backup key", "err", err)
			return controller.Retry()
		}
		return controller.Done()
	}
	// A tenant without machines has no etcd to back up: its schedule starts
	// with its first machine, and no Failed backup (nor its PKI, made on
	// first use) is made for it every interval.
	if slot, ok := dueSlot(t, c.cfg.Clock.Now()); ok && c.hasMachines(tenant) {
		b, created, err := c.createScheduled(ctx, tenant, slot)
		switch {
		case err != nil:
			log.Warn("creating the scheduled backup", "slot", slot, "err", err)
			return controller.Retry()
		case created:
			if err := c.take(ctx, b); err != nil {
				log.Warn("backup", "backup", b.Metadata.Name, "err", err)
				return controller.Retry()
			}
		}
	}
	if err := c.retire(ctx, tenant, t, restores); err != nil {
		log.Warn("retention", "err", err)
		failed = true
	}
	if failed {
		return controller.Retry()
	}
	return controller.Done()
}

// hasMachines reports whether the tenant has any machine.
func (c *Controller) hasMachines(tenant string) bool {
	return c.cfg.Cache.Count(domain.MachineKind.Kind, tenant) > 0
}

// createScheduled creates the backup of slot; created is false when it
// exists already (taken, or being taken by the run that created it).
func (c *Controller) createScheduled(ctx context.Context, tenant string, slot time.Time) (domain.EtcdBackup, bool, error) {
	name := domain.ScheduledBackupName(slot)
	ref := domain.ObjectRef(domain.EtcdBackupKind, tenant, name)
	spec, err := json.Marshal(domain.EtcdBackupSpec{Trigger: domain.BackupSchedule, Slot: &slot})
	if err != nil {
		return domain.EtcdBackup{}, false, err
	}
	res, err := c.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: Actor,
		Now: c.cfg.Clock.Now(), NewUID: uuid.NewString(),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant,
			Finalizers: []string{domain.BackupObjectFinalizer}}, Spec: spec}},
		eventstore.UpdateOptions{Hint: c.cfg.Cache})
	if domain.IsAlreadyExists(err) {
		return domain.EtcdBackup{}, false, nil
	}
	if err != nil {
		return domain.EtcdBackup{}, false, err
	}
	if err := c.cfg.Cache.WaitFor(ctx, res.Seq); err != nil {
		return domain.EtcdBackup{}, false, err
	}
	b, ok, err := projections.Get[domain.EtcdBackup](c.cfg.Cache, ref)
	if err != nil || !ok {
		return domain.EtcdBackup{}, false, err
	}
	return *b, true, nil
}

// retire deletes what retention lets go (see retire in plan.go).
func (c *Controller) retire(ctx context.Context, tenant string, t *domain.Tenant, restores []domain.Restore) error {
	backups, err := projections.List[domain.EtcdBackup](c.cfg.Cache, domain.EtcdBackupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return err
	}
	keep := 0
	if t != nil && t.Spec.EtcdBackup.Enabled() {
		keep = t.Spec.EtcdBackup.Keep
	}
	inUse := map[string]bool{}
	for _, rs := range restores {
		if !rs.Status.Final() {
			inUse[rs.Spec.Backup] = true
		}
	}
	for _, name := range retire(backups, keep, c.cfg.Clock.Now(), inUse) {
		ref := domain.ObjectRef(domain.EtcdBackupKind, tenant, name)
		res, err := c.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpDelete, Ref: ref, Actor: Actor, Now: c.cfg.Clock.Now()},
			eventstore.UpdateOptions{Hint: c.cfg.Cache, Retries: 5})
		if err != nil && !domain.IsNotFound(err) {
			return err
		}
		if err == nil {
			if err := c.cfg.Cache.WaitFor(ctx, res.Seq); err != nil {
				return err
			}
		}
		b, ok, err := projections.Get[domain.EtcdBackup](c.cfg.Cache, ref)
		if err != nil {
			return err
		}
		if ok {
			if err := c.finalize(ctx, *b); err != nil {
				return err
			}
		}
	}
	return nil
}

// finalize deletes a backup's object, then lets the backup go (drops its
// finalizer). Safe to run twice.
func (c *Controller) finalize(ctx context.Context, b domain.EtcdBackup) error {
	if err := c.cfg.Backups.Delete(ctx, objectOf(b)); err != nil {
		return err
	}
	ref := domain.ObjectRef(domain.EtcdBackupKind, b.Metadata.Tenant, b.Metadata.Name)
	_, err := c.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Hint: c.cfg.Cache, Retries: 5}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil || !slices.Contains(state.Metadata.Finalizers, domain.BackupObjectFinalizer) {
			return nil, nil
		}
		next := state.DeepCopy()
		next.Metadata.Finalizers = slices.DeleteFunc(next.Metadata.Finalizers, func(f string) bool { return f == domain.BackupObjectFinalizer })
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next, Actor: Actor, Now: c.cfg.Clock.Now()})
	})
	return err
}

// objectOf names a backup's object in the bucket.
func objectOf(b domain.EtcdBackup) string {
	return eventstore.EtcdBackupObject(b.Metadata.Tenant, b.Metadata.Name, b.Metadata.UID)
}
