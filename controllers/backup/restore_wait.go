package backup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// await polls probe every PollInterval until it answers nil, recording on
// the restore's status (st.Wait, through write) what the stage waits for:
// when the first look fails, and again when the answer changes
// (domain.WaitChanged bounds the writes). A wait recorded before for the
// same thing (a run resumed after a restart) keeps its deadline. Past the
// deadline it answers the stage's failure, naming the stage and the last
// answer; an error wrapping ErrStore when the wait could not be recorded
// (the run is retried). The wait stays recorded on return: the caller's
// next write (the next stage, or the failure) clears it.
func (c *Controller) await(ctx context.Context, st *domain.RestoreStatus, write func(func(*domain.RestoreStatus)) error,
	what string, timeout time.Duration, probe func() error) error {
	clock := c.cfg.Clock
	began := clock.Now()
	for {
		err := probe()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrStore) {
			return err
		}

		now := clock.Now()
		w := domain.BeginWait(st.Wait, what, began, timeout)
		w.Observe(err.Error(), now)
		if w.Expired(now) {
			return errors.New(w.DeadlineProblem("stage " + st.Stage))
		}
		if domain.WaitChanged(st.Wait, w) {
			if err := write(func(st *domain.RestoreStatus) { st.Wait = &w }); err != nil {
				return fmt.Errorf("%w: recording the wait: %w", ErrStore, err)
			}
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clock.At(now.Add(c.cfg.PollInterval)):
		}
	}
}
