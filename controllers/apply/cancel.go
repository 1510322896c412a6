package apply

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// cancelSubject is where cancel requests for runs go (request/reply): the
// replica holding the worker lease answers, or, with tenants shared over
// the replicas, the replica running the apply.
const cancelSubject = "rezus.applyctl.cancel"

// onCancel answers a cancel request for a run of this replica.
func (w *Worker) onCancel(m *nats.Msg) {
	parts := strings.Split(strings.TrimPrefix(m.Subject, cancelSubject+"."), ".")
	answer := func(s string) { _ = m.Respond([]byte(s)) }
	if len(parts) != 2 {
		answer("bad request")
		return
	}
	w.mu.Lock()
	r, ok := w.running[parts[0]]
	if ok && r.apply == parts[1] {
		r.canceled = true
		r.cancel(errCanceledByUser)
	}
	w.mu.Unlock()
	if ok && r.apply == parts[1] {
		answer("canceled")
		return
	}
	if w.cfg.Tenants != nil {
		// Every replica hears the request; the one running the apply
		// answers, and the first answer is the one the caller reads.
		return
	}
	answer("not running")
}

// Run runs the worker until ctx ends. With tenants shared over the
// replicas, every replica answers the cancel requests of its own runs.
func (w *Worker) Run(ctx context.Context) error {
	if w.cfg.Tenants == nil {
		return w.Base.Run(ctx)
	}
	sub, err := w.cfg.Store.Conn().Subscribe(cancelSubject+".>", w.onCancel)
	if err != nil {
		return fmt.Errorf("apply worker: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	return w.Base.Run(ctx)
}

// ErrNotRunning says the apply to cancel is not running.
var ErrNotRunning = errors.New("the apply is not running")

// Cancel asks the replica running applies to stop tenant's run apply; the run
// is interrupted as a user would interrupt tofu (it releases its lock) and
// recorded as Canceled.
func Cancel(ctx context.Context, nc *nats.Conn, tenant, apply string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := nc.RequestWithContext(ctx, cancelSubject+"."+tenant+"."+apply, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w: no replica is running applies", ErrNotRunning)
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		// Replicas sharing tenants answer only for a run they have.
		return fmt.Errorf("%w: no replica answered", ErrNotRunning)
	}
	if err != nil {
		return err
	}
	if string(resp.Data) != "canceled" {
		return ErrNotRunning
	}
	return nil
}
