package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrAckLater is what a handler of ConsumeDurable answers for a message it
// took over: it acks (or naks) the message itself once done with it.
var ErrAckLater = errors.New("the handler acks the message itself")

// ConsumeDurable feeds the messages of the durable consumer name on the event
// stream to handle, one at a time in stream order, until ctx ends. A message
// handle accepts is acked; one it fails is logged and redelivered a second
// later; one it answers ErrAckLater for is its own to ack. The caller
// provisions the consumer (and holds any lease it needs).
func (s *Store) ConsumeDurable(ctx context.Context, name string, log *slog.Logger, handle func(context.Context, jetstream.Msg) error) error {
	cons, err := s.js.Consumer(ctx, StreamName, name)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", name, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("consumer %s: %w", name, err)
	}
	defer func() { handBack(it) }()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A loaded server (or machine) misses a heartbeat now and then:
			// the iterator pulls again by itself. That is no reason to stop
			// the controller, let alone the server.
			if errors.Is(err, jetstream.ErrNoHeartbeat) {
				log.Warn("consumer missed a heartbeat; pulling again", "consumer", name)
				continue
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				log.Warn("consumer's pull ended; starting it again", "consumer", name)
				handBack(it)
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
				if it, err = cons.Messages(jetstream.PullMaxMessages(64)); err != nil {
					return fmt.Errorf("consumer %s: %w", name, err)
				}
				continue
			}
			return fmt.Errorf("consumer %s: %w", name, err)
		}
		if err := handle(ctx, msg); err != nil {
			if errors.Is(err, ErrAckLater) {
				continue
			}
			if ctx.Err() != nil {
				// Stopping: the next consumer of the durable gets it at
				// once, not after the consumer's AckWait (a key lost for
				// that long at every lease handover).
				_ = msg.Nak()
				return nil
			}
			log.Warn("handling an event failed; it will be redelivered", "consumer", name, "subject", msg.Subject(), "err", err)
			_ = msg.NakWithDelay(time.Second)
			continue
		}
		_ = msg.Ack()
	}
}

// handBack stops pulling and gives back (naks) the messages pulled but not
// handled, so that the next consumer of the durable (another replica taking
// the lease, or this one restarting) gets them at once instead of after the
// consumer's AckWait.
func handBack(it jetstream.MessagesContext) {
	it.Drain()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		msg, err := it.Next(jetstream.NextContext(ctx))
		cancel()
		if err != nil {
			return
		}
		_ = msg.Nak()
	}
}
