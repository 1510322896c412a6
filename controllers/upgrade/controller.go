package upgrade

import (
	"context"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
)

// sagaController is the saga as the controller runtime drives it: keys are
// tenants, and a tenant's run carries out its current upgrade.
type sagaController struct{ s *Saga }

func unfinishedTenants(s *Saga) []string {
	seen := map[string]bool{}
	var out []string
	for _, u := range unfinishedUpgrades(s.cfg.Cache, "") {
		if t := u.Metadata.Tenant; !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// Keys handles events in stream order: version changes start runs (an
// Upgrade created, which comes back as an event of its own), new runs and
// cancel requests queue their tenant.
func (c sagaController) Keys(ctx context.Context, ev *domain.Event, seq uint64) ([]string, error) {
	s := c.s
	// Status changes (the saga's own among them) change no version and no run.
	if strings.HasSuffix(ev.Type, "StatusUpdated") {
		return nil, nil
	}
	// Decide on a read model that has this event.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := s.cfg.Cache.WaitFor(wctx, seq)
	cancel()
	if err != nil {
		return nil, err
	}
	switch ev.Object.Kind {
	case domain.UpgradeKind.Kind:
		ref := ev.Object.Ref()
		if ev.Type == "UpgradeCancelRequested" {
			s.mu.Lock()
			r := s.runs[ref.Tenant]
			active := r != nil && r.ref.Name == ref.Name
			if active {
				r.canceled.Store(true)
			}
			s.mu.Unlock()
			if !active {
				// Queued behind another run of the tenant: it ends now.
				if err := s.cancelPending(ctx, ref); err != nil {
					return nil, err
				}
			}
		}
		return []string{ref.Tenant}, nil
	case domain.TenantKind.Kind, domain.NodeGroupKind.Kind:
		return nil, s.trigger(ctx, s.versions, ev, seq)
	}
	return nil, nil
}

// statusWriter writes statuses as the saga: its Upgrades', and the parts of
// others' it still writes (domain.StatusWritesToMove).
func (s *Saga) statusWriter() eventstore.StatusWriter {
	return eventstore.StatusWriter{Store: s.cfg.Store, Actor: Actor, Now: s.cfg.Now, Retries: 20}
}

// cancelPending ends a run that has not started, on a cancel request.
func (s *Saga) cancelPending(ctx context.Context, ref domain.Ref) error {
	now := s.cfg.Now().UTC()
	_, err := eventstore.UpdateStatus(ctx, s.statusWriter(), ref, func(_ *domain.Object, st *domain.UpgradeStatus) (bool, error) {
		if st.Phase != domain.UpgradePending {
			return false, nil
		}
		st.Phase, st.Reason, st.EndTime = domain.UpgradeCanceled, "canceled before it started", &now
		return true, nil
	})
	if domain.IsNotFound(err) {
		return nil
	}
	return err
}

// Due is at once: an upgrade waits for nothing but its tenant's previous one.
func (sagaController) Due(_ string, e controller.Entry) time.Time { return e.Last }

// Reconcile carries out the tenant's current upgrade: its Running one
// (resumed after a restart) or else its oldest Pending one. A run that
// stopped on an error of the saga's own is resumed after RetryBackoff; a
// tenant with another upgrade waiting runs again at once.
func (c sagaController) Reconcile(ctx context.Context, tenant string, _ controller.Entry, _ int) controller.Result {
	s := c.s
	u := currentUpgrade(unfinishedUpgrades(s.cfg.Cache, tenant))
	if u == nil {
		return controller.Done()
	}
	r := &upgradeRun{s: s, ref: domain.ObjectRef(domain.UpgradeKind, tenant, u.Metadata.Name)}
	s.mu.Lock()
	s.runs[tenant] = r
	s.mu.Unlock()
	err := r.execute(ctx)
	s.mu.Lock()
	delete(s.runs, tenant)
	s.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Log.Warn("upgrade saga: a run stopped; resuming it later", "tenant", tenant, "err", err, "after", s.cfg.RetryBackoff)
		}
		return controller.Retry()
	}
	if len(unfinishedUpgrades(s.cfg.Cache, tenant)) > 0 {
		return controller.Later(0)
	}
	return controller.Done()
}

// currentUpgrade picks from a tenant's unfinished upgrades (oldest first)
// the one to carry out: a Running one goes before the Pending ones whatever
// its age.
func currentUpgrade(unfinished []domain.Upgrade) *domain.Upgrade {
	for i := range unfinished {
		if unfinished[i].Status.Phase == domain.UpgradeRunning {
			return &unfinished[i]
		}
	}
	if len(unfinished) == 0 {
		return nil
	}
	return &unfinished[0]
}
