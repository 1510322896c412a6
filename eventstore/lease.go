package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LeaseBucket holds leases: keys whose value is the holder, kept alive by
// compare-and-set renewals and removed by the bucket's TTL when a holder dies.
const LeaseBucket = "rezus-leases"

// LeaseTTL is how long a lease outlives its holder's last renewal.
const LeaseTTL = 10 * time.Second

// Leases hands out named leases so that a worker runs on one replica at a time.
type Leases struct {
	kv  jetstream.KeyValue
	ttl time.Duration
}

// OpenLeases provisions the lease bucket.
func OpenLeases(ctx context.Context, s *Store, ttl time.Duration) (*Leases, error) {
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: LeaseBucket, Description: "worker leases", History: 1, TTL: ttl,
		Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", LeaseBucket, err)
	}
	return &Leases{kv: kv, ttl: ttl}, nil
}

// RunWhileHeld acquires the lease name for holder (waiting while someone else
// holds it), runs work with a context that ends when the lease is lost, and
// repeats until ctx ends. It returns work's error, if any, except one of a
// cluster slow to answer (ClusterNotReady): then it waits and leads again.
func (l *Leases) RunWhileHeld(ctx context.Context, name, holder string, work func(context.Context) error) error {
	for {
		err := l.Do(ctx, name, holder, work)
		if ctx.Err() != nil {
			return nil
		}
		// Work that ended with its context while ctx goes on lost the
		// lease (a replica cut off from its quorum): it leads again once
		// it can, rather than end the server (CI saw the projector's
		// "context canceled" stop a replica cut off from the others).
		if err != nil && !ClusterNotReady(err) && !errors.Is(err, context.Canceled) {
			return err
		}
		if err != nil && sleepCtx(ctx, time.Second) != nil {
			return nil // the cluster did not answer in time: wait and lead again
		}
	}
}

// Do acquires the lease name for holder (waiting while someone else holds it),
// runs work once with a context that ends when the lease is lost (work must
// stop then: another replica may take over), and releases the lease after.
func (l *Leases) Do(ctx context.Context, name, holder string, work func(context.Context) error) error {
	rev, err := l.acquire(ctx, name, holder)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	renewDone := make(chan struct{})
	lastRev := rev
	go func() {
		defer close(renewDone)
		// The renewal ends when the lease is lost, and takes work's context with it.
		defer cancel()
		lastRev = l.renew(wctx, name, holder, rev)
	}()
	err = work(wctx)
	cancel()
	<-renewDone
	// Release so another replica need not wait for the TTL; only if it is still ours.
	_ = l.kv.Delete(context.WithoutCancel(ctx), name, jetstream.LastRevision(lastRev))
	return err
}

func (l *Leases) acquire(ctx context.Context, name, holder string) (uint64, error) {
	for {
		rev, err := l.kv.Create(ctx, name, []byte(holder))
		if err == nil {
			return rev, nil
		}
		wait := l.ttl / 4
		var apiErr *jetstream.APIError
		switch {
		case errors.Is(err, jetstream.ErrKeyExists):
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
			// Another replica wrote the key between the create and the
			// update over a delete marker the create tried: it holds it now.
		case ClusterNotReady(err) && ctx.Err() == nil:
			// A create that timed out may have been stored: then the
			// lease is ours. Otherwise try again soon; a cluster electing
			// a leader answers within seconds.
			if e, gerr := l.kv.Get(ctx, name); gerr == nil && string(e.Value()) == holder {
				return e.Revision(), nil
			}
			wait = time.Second
		default:
			return 0, fmt.Errorf("acquiring lease %s: %w", name, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

// renew keeps the lease alive until ctx ends or a renewal fails (someone else
// took it), and returns the last revision it wrote.
func (l *Leases) renew(ctx context.Context, name, holder string, rev uint64) uint64 {
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return rev
		case <-t.C:
			next, err := l.kv.Update(ctx, name, []byte(holder), rev)
			if err != nil {
				// An update cancelled mid-flight may still have been stored: if
				// the lease is still ours, return its revision so the release
				// matches. Otherwise it was lost, and the release, conditional
				// on rev, cannot delete a lease someone else took meanwhile.
				if e, gerr := l.kv.Get(context.WithoutCancel(ctx), name); gerr == nil && string(e.Value()) == holder {
					return e.Revision()
				}
				return rev
			}
			rev = next
		}
	}
}
