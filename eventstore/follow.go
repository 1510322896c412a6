package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rezuscloud/rezuscloud/domain"
)

// Cursor reads events in stream order from an ordered consumer. It pulls a
// bounded number of messages ahead, so a slow reader slows only itself.
type Cursor struct {
	cons jetstream.Consumer
	it   jetstream.MessagesContext
	dead *deadLetters
	seen *schemaSeen
}

// Follow returns a cursor over events with sequence >= from whose subjects
// match one of subjects (nil: every resource event). It follows new events as
// they are appended until Stop.
func (s *Store) Follow(ctx context.Context, from uint64, subjects []string) (*Cursor, error) {
	if from == 0 {
		from = 1
	}
	cfg := jetstream.OrderedConsumerConfig{
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
		FilterSubjects: subjects,
	}
	var cons jetstream.Consumer
	// While a replica restarts, the stream's leader may be elected anew:
	// the create then times out on jetstream's own deadline (ctx has none
	// of its own, or a later one), which is as transient as a 503.
	err := retry(ctx, func() error {
		var err error
		cons, err = s.js.OrderedConsumer(ctx, StreamName, cfg)
		return err
	}, func(err error) bool {
		return temporarilyUnavailable(err) || (timedOut(err) && ctx.Err() == nil)
	})
	if err != nil {
		// A deadline of the caller's that passed while the stream was
		// slow to answer is as transient; only a caller gone is not.
		if !errors.Is(ctx.Err(), context.Canceled) && (temporarilyUnavailable(err) || timedOut(err)) {
			return nil, &domain.Error{Reason: domain.ReasonServiceUnavailable, RetryAfterSeconds: 2,
				Message: "the event stream cannot be followed now (its leader is being elected?): " + err.Error()}
		}
		return nil, fmt.Errorf("creating ordered consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return nil, fmt.Errorf("starting ordered consumer: %w", err)
	}
	return &Cursor{cons: cons, it: it, dead: s.dead, seen: s.seen}, nil
}

// timedOut says whether err is a deadline passing, wrapped or only in
// words (jetstream does not always wrap context.DeadlineExceeded).
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), context.DeadlineExceeded.Error())
}

// Next blocks for the next event. Pending is how many matching events are
// still behind it in the stream at the time it was delivered.
// A record that cannot be decoded is kept as a dead letter and skipped.
func (c *Cursor) Next(ctx context.Context) (*Record, error) {
	for {
		msg, err := c.it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if ctx.Err() == nil && (temporarilyUnavailable(err) || timedOut(err)) {
				return nil, &domain.Error{Reason: domain.ReasonServiceUnavailable, RetryAfterSeconds: 2,
					Message: "the event stream stopped answering (its leader is being elected?): " + err.Error()}
			}
			return nil, err
		}
		md, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("reading message metadata: %w", err)
		}
		rec, err := decodeRecord(c.seen, msg.Subject(), md.Sequence.Stream, msg.Headers(), msg.Data())
		if err != nil {
			c.dead.record(StreamName, md.Sequence.Stream, msg.Subject(), msg.Data(), err)
			continue
		}
		rec.Pending = md.NumPending
		return rec, nil
	}
}

// Stop ends the cursor.
func (c *Cursor) Stop() { c.it.Stop() }
