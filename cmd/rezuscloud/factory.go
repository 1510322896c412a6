package main

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos/factory"
)

// schematicRegistrar is the Image Factory client the apply worker and the
// upgrade saga register schematics through. It is set once the factory's
// URL is known: with --with-emulator and no --image-factory, that is the
// in-process emulator's, which starts after the workers are configured.
type schematicRegistrar struct {
	c atomic.Pointer[factory.Client]
}

func (r *schematicRegistrar) set(c *factory.Client) { r.c.Store(c) }

// Register registers s with the factory, once it is known.
func (r *schematicRegistrar) Register(ctx context.Context, s *domain.Schematic) error {
	c := r.c.Load()
	if c == nil {
		return errors.New("the image factory is not known yet (the emulator is starting)")
	}
	return c.Register(ctx, s)
}
