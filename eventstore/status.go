package eventstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// StatusWriter is who writes a status, and how: controllers keep one and pass
// it to UpdateStatus for every object they write the status of.
type StatusWriter struct {
	Store *Store
	// Actor is recorded on the events (e.g. "system:apply").
	Actor string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Hint, when set, decides on the cached state first (see UpdateOptions.Hint).
	Hint StateHint
	// Retries is how many conflicting appends are re-decided; 0 means 5.
	Retries int
}

// UpdateStatus loads the object at ref, decodes its status into S, lets
// mutate change it, and appends the status update; a concurrent writer makes
// it decide again on fresh state, so mutate may run more than once and must
// start from what it is given. mutate sees the object (read-only) for its
// generation, spec and deletion state; it returns false to leave the status
// as it is (no event). A missing object answers NotFound. A controller
// changing a part of the status another owns (domain.StatusOwners) is
// refused with Forbidden, naming the part and its owner.
func UpdateStatus[S any](ctx context.Context, w StatusWriter, ref domain.Ref, mutate func(obj *domain.Object, st *S) (bool, error)) (Result, error) {
	retries := w.Retries
	if retries == 0 {
		retries = 5
	}
	now := w.Now
	if now == nil {
		now = time.Now
	}
	return w.Store.Update(ctx, ref, UpdateOptions{Retries: retries, Hint: w.Hint}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, domain.NewNotFound(ref.Kind, ref.Name)
		}
		var st S
		if len(state.Status) > 0 {
			if err := json.Unmarshal(state.Status, &st); err != nil {
				return nil, fmt.Errorf("decoding the status of %s: %w", ref, err)
			}
		}
		changed, err := mutate(state, &st)
		if err != nil || !changed {
			return nil, err
		}
		raw, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		if err := domain.CheckStatusWrite(ref, w.Actor, state.Status, raw); err != nil {
			return nil, err
		}
		return domain.Decide(state, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Actor: w.Actor, Now: now(),
			Object: &domain.Object{Status: raw}})
	})
}
