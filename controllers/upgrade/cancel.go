package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// CancelRequest is who asks to cancel an upgrade, and when.
type CancelRequest struct {
	Tenant, Name  string
	Actor         string
	CorrelationID string
	Now           time.Time
}

// Cancel asks a run to stop after the machine it is upgrading: it sets
// spec.cancelRequested (an UpgradeCancelRequested event), which the saga reads
// before it starts each machine, on whichever replica runs it and after a
// restart too. A run that has finished answers Conflict; asking again
// changes nothing.
func Cancel(ctx context.Context, store *eventstore.Store, req CancelRequest) (eventstore.Result, error) {
	ref := domain.Ref{Kind: domain.UpgradeKind.Kind, Tenant: req.Tenant, Name: req.Name}
	return store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 20}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, domain.NewNotFound(ref.Kind, ref.Name)
		}
		var u domain.Upgrade
		if err := json.Unmarshal(upgradeJSON(state), &u); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", ref, err)
		}
		if u.Status.Final() {
			return nil, domain.NewConflict(ref.Kind, ref.Name, fmt.Sprintf("the upgrade has already finished (%s)", u.Status.Phase))
		}
		if u.Spec.CancelRequested {
			return nil, nil
		}
		u.Spec.CancelRequested = true
		obj := state.DeepCopy()
		obj.Spec = upgradeJSON(u.Spec)
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: obj,
			Actor: req.Actor, CorrelationID: req.CorrelationID, Now: req.Now})
	})
}
