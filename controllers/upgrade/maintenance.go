package upgrade

import (
	"context"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// awaitMaintenance holds a machine that has not started until the tenant's
// maintenance window is open (domain.MaintenanceOpen on the saga's clock),
// saying so in the run's reason; a machine under way is never held (it
// finishes, and the next one waits). A run created with spec.now is not
// held. It answers false when the run must stop instead (canceled, failed,
// the server stopping).
func (r *upgradeRun) awaitMaintenance(ctx context.Context) bool {
	if r.spec.Now {
		return true
	}
	said := ""
	for {
		if r.stopping(ctx) {
			return false
		}
		t, ok, err := projections.Get[domain.Tenant](r.s.cfg.Cache, domain.TenantRef(r.ref.Tenant))
		if err == nil && ok {
			open, next := domain.MaintenanceOpen(t.Spec.Maintenance, r.s.cfg.Now())
			if open {
				if said != "" {
					_ = r.record(ctx, func(st *domain.UpgradeStatus) { st.Reason, st.MaintenanceOpensAt = "", nil })
				}
				return true
			}
			if msg := domain.MaintenanceWaiting(t.Spec.Maintenance, next); msg != said {
				at := next.UTC()
				if r.record(ctx, func(st *domain.UpgradeStatus) { st.Reason, st.MaintenanceOpensAt = msg, &at }) == nil {
					said = msg
				}
			}
		}
		// A window opens in minutes or hours: no quick first looks.
		if r.sleep(ctx, time.Time{}) != nil {
			return false
		}
	}
}
