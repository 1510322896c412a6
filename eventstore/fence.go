package eventstore

import (
	"context"
	"errors"
	"fmt"
)

// ErrFenced is what a write refused by its fence, and a run ended because
// its replica no longer holds its tenant, wrap: the run must stop at once
// (tofu is killed rather than interrupted, since another replica may
// start the tenant's next run).
var ErrFenced = errors.New("fenced")

// fenceKey is the context key of a write fence.
type fenceKey struct{}

// WithFence returns ctx with a fence every append made with it checks
// first: a run holding a tenant (internal/controller.Tenants) writes only
// while its hold is still this replica's, so a replica that lost a tenant
// (its heartbeat went stale, another replica took the tenant) cannot write
// on top of the new holder's work.
func WithFence(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, fenceKey{}, check)
}

// checkFence returns the error of ctx's fence, if it has one.
func checkFence(ctx context.Context) error {
	check, ok := ctx.Value(fenceKey{}).(func() error)
	if !ok || check == nil {
		return nil
	}
	if err := check(); err != nil {
		if errors.Is(err, ErrFenced) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return nil
}
