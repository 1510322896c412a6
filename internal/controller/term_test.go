package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/controller"
)

// finisher is a controller whose runs finish their work just as the term
// ends (a tofu apply that completes as the server is told to stop), and
// answer Done.
type finisher struct {
	started chan string
}

func (f *finisher) Keys(_ context.Context, ev *domain.Event, _ uint64) ([]string, error) {
	return []string{ev.Object.Metadata.Name}, nil
}

func (f *finisher) Due(_ string, e controller.Entry) time.Time { return e.Last }

func (f *finisher) Reconcile(ctx context.Context, key string, _ controller.Entry, _ int) controller.Result {
	f.started <- key
	<-ctx.Done()
	return controller.Done()
}

// TestADoneRunLeavesTheQueueWhenTheTermEndsAsItFinishes: a run that did
// its work as the term ended (SIGTERM to a lame duck, a lost lease) still
// takes its entry out of the queue; left there, the next leader would do
// the work again (a rolling upgrade once showed a second Succeeded apply
// of one change).
func TestADoneRunLeavesTheQueueWhenTheTermEndsAsItFinishes(t *testing.T) {
	h := newHarness(t)
	f := &finisher{started: make(chan string, 1)}
	_, stop := h.run(t, f)
	h.touch(t, "acme")
	require.Equal(t, "acme", recv(t, f.started, "the run"))
	require.True(t, h.queued(t, "acme"))

	require.NoError(t, stop())
	require.False(t, h.queued(t, "acme"), "the finished run's entry is out of the queue")
}
