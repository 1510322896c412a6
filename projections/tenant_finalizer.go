package projections

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// TenantFinalizerLease makes the tenant finalizer run on one replica at a time.
const TenantFinalizerLease = "tenant-finalizer"

// TenantFinalizer finishes tenant deletions: for every terminating tenant it
// deletes the tenant's objects, and once none remain (and no finalizer holds
// the tenant) it deletes the tenant. It also deletes objects left in a tenant
// that no longer exists (a create that raced the tenant's deletion). Each pass
// is safe to run twice.
type TenantFinalizer struct {
	Cache *Cache
	Store *eventstore.Store
	Log   *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Interval bounds how often a pass runs while events arrive; default 200ms.
	Interval time.Duration

	defaults sync.Once
}

func (f *TenantFinalizer) setDefaults() {
	f.defaults.Do(func() {
		if f.Now == nil {
			f.Now = time.Now
		}
		if f.Interval == 0 {
			f.Interval = 200 * time.Millisecond
		}
		if f.Log == nil {
			f.Log = slog.Default()
		}
	})
}

// Run makes passes whenever the cache moves, until ctx ends.
func (f *TenantFinalizer) Run(ctx context.Context) error {
	f.setDefaults()
	var seen uint64
	for {
		if f.Cache.Ready() {
			if seq := f.Cache.Seq(); seq != seen {
				seen = seq
				f.Pass(ctx)
			}
		}
		t := time.NewTimer(f.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Pass reconciles every terminating tenant and every orphaned object once.
func (f *TenantFinalizer) Pass(ctx context.Context) {
	f.setDefaults()
	for _, t := range f.Cache.Terminating(domain.TenantKind.Kind) {
		if err := f.finalize(ctx, t.Name); err != nil && ctx.Err() == nil {
			f.Log.Warn("tenant finalizer", "tenant", t.Name, "err", err)
		}
	}
	for _, ref := range f.Cache.Orphans() {
		f.delete(ctx, ref, 0)
	}
}

func (f *TenantFinalizer) finalize(ctx context.Context, tenant string) error {
	// While other finalizers hold the tenant (the apply worker's, until its
	// infrastructure is destroyed), its machines stay: they are what that
	// teardown works from (bare-metal machines to reset), and it removes them.
	held := false
	if t, ok := f.Cache.GetObject(domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant}); ok {
		held = len(t.Metadata.Finalizers) > 0
	}
	children := f.Cache.Children(tenant)
	for _, ref := range children {
		if held && ref.Kind == domain.MachineKind.Kind {
			continue
		}
		f.delete(ctx, ref, 0)
	}
	remaining := len(f.Cache.Children(tenant))
	_, err := f.Store.Execute(ctx, domain.Command{
		Op: domain.OpDelete, Ref: domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant},
		Actor: "system:tenant-finalizer", Now: f.Now(), Dependents: remaining,
	}, eventstore.UpdateOptions{Retries: 3, Hint: f.Cache})
	if domain.IsNotFound(err) {
		return nil
	}
	return err
}

func (f *TenantFinalizer) delete(ctx context.Context, ref domain.Ref, dependents int) {
	res, err := f.Store.Execute(ctx, domain.Command{
		Op: domain.OpDelete, Ref: ref, Actor: "system:tenant-finalizer", Now: f.Now(), Dependents: dependents,
	}, eventstore.UpdateOptions{Retries: 3, Hint: f.Cache})
	if err != nil && !domain.IsNotFound(err) {
		f.Log.Warn("tenant finalizer: deleting", "object", ref.String(), "err", err)
		return
	}
	if err == nil && res.Seq > 0 {
		_ = f.Cache.WaitFor(ctx, res.Seq)
	}
}
