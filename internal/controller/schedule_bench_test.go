package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/controller"
)

// parked is a controller whose "idle-" keys are never due (they stay
// queued, as tenants waiting out a long debounce or a backoff do) and whose
// other keys are due at once; each run reports its key.
type parked struct{ ran chan string }

func (p *parked) Keys(_ context.Context, ev *domain.Event, _ uint64) ([]string, error) {
	return []string{ev.Object.Metadata.Name}, nil
}

func (p *parked) Due(key string, e controller.Entry) time.Time {
	if strings.HasPrefix(key, "idle-") {
		return e.Last.Add(1000 * time.Hour)
	}
	return e.Last
}

func (p *parked) Reconcile(_ context.Context, key string, _ controller.Entry, _ int) controller.Result {
	if !strings.HasPrefix(key, "idle-") {
		p.ran <- key
	}
	return controller.Done()
}

// BenchmarkScheduleWithQueuedKeys is the cost of one event for a key that
// runs at once while n other keys wait in the queue (event, queue write,
// scheduling and the run's start). The scheduler used to look at every
// queued key on every wake-up (O(n) per event, and a sort of the due ones);
// it must not grow with n now.
func BenchmarkScheduleWithQueuedKeys(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) {
			h := newHarness(b)
			c := &parked{ran: make(chan string, 1)}
			var wg sync.WaitGroup
			const writers = 16
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < n; i += writers {
						h.touch(b, fmt.Sprintf("idle-%06d", i))
					}
				}()
			}
			wg.Wait()
			_, stop := h.run(b, c)
			defer func() { require.NoError(b, stop()) }()
			// The first run proves the runtime is up and has taken in the queue.
			h.touch(b, "warm")
			require.Equal(b, "warm", <-c.ran)
			b.ResetTimer()
			for i := range b.N {
				key := fmt.Sprintf("hot-%06d", i)
				h.touch(b, key)
				select {
				case got := <-c.ran:
					require.Equal(b, key, got)
				case <-time.After(30 * time.Second):
					b.Fatalf("%s did not run", key)
				}
			}
		})
	}
}
