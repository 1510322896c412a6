package projections

import (
	"context"
)

// Changes reports the stream sequence of every event on subjects from now on:
// what a live page needs to know it must re-render (and, with WaitFor, that
// the read model already shows the change). stop ends the follower and waits
// for its goroutine; so does the end of ctx.
func (c *Cache) Changes(ctx context.Context, subjects []string) (changes <-chan uint64, stop func(), err error) {
	_, last, err := c.store.Bounds(ctx)
	if err != nil {
		return nil, nil, err
	}
	cur, err := c.store.Follow(ctx, last+1, subjects)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan uint64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			rec, err := cur.Next(ctx)
			if err != nil {
				return
			}
			select {
			case ch <- rec.Seq:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, func() {
		cancel()
		<-done
		cur.Stop()
	}, nil
}
