package eventstore

import (
	"context"
	"fmt"
)

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
		return fmt.Errorf("fenced: %w", err)
	}
	return nil
}
