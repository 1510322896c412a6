package apply

import (
	"context"
	"errors"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// StoreState is the StateStore the worker uses in a server: the state buckets
// the HTTP backend serves.
func StoreState(s *eventstore.StateStore) StateStore { return storeState{s} }

type storeState struct{ s *eventstore.StateStore }

func (a storeState) LockHolderApply(ctx context.Context, tenant string) (string, error) {
	applyID, _, _, err := a.s.LockHolder(ctx, tenant)
	return applyID, err
}

func (a storeState) ForceUnlock(ctx context.Context, tenant string) error {
	_, _, err := a.s.ForceUnlock(ctx, tenant)
	return err
}

func (a storeState) DeleteState(ctx context.Context, tenant string) error {
	return a.s.Purge(ctx, tenant)
}

func (a storeState) StateRevision(ctx context.Context, tenant string) (uint64, error) {
	st, err := a.s.Get(ctx, tenant)
	if errors.Is(err, eventstore.ErrStateNotFound) {
		return 0, nil
	}
	if err != nil || st == nil {
		return 0, err
	}
	return st.Version.Revision, nil
}

func (a storeState) State(ctx context.Context, tenant string) ([]byte, error) {
	st, err := a.s.Get(ctx, tenant)
	if errors.Is(err, eventstore.ErrStateNotFound) || err == nil && st == nil {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return st.Data, nil
}

func (a storeState) HasState(ctx context.Context, tenant string) (bool, error) {
	st, err := a.s.Get(ctx, tenant)
	if errors.Is(err, eventstore.ErrStateNotFound) {
		return false, nil
	}
	return err == nil && st != nil, err
}
