package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Position is where a replay starts: after a stream sequence, or at a time.
// The zero value is the oldest message the stream holds.
type Position struct {
	// After starts with the first message after this stream sequence; 0 is the oldest.
	After uint64
	// Time, when set, starts with the first message stored at or after it
	// (JetStream's own timestamp); After is then ignored.
	Time time.Time
}

// deliver is the consumer start for the position.
func (p Position) deliver() (policy jetstream.DeliverPolicy, seq uint64, at *time.Time) {
	if !p.Time.IsZero() {
		t := p.Time
		return jetstream.DeliverByStartTimePolicy, 0, &t
	}
	return jetstream.DeliverByStartSequencePolicy, p.After + 1, nil
}

// Window is a stretch of a stream: from a position to an optional end. Both
// ends compare with the stream's sequence and storage time, not with
// timestamps inside the payload.
type Window struct {
	From Position
	// UntilSeq, when set, ends the window with this sequence (inclusive).
	UntilSeq uint64
	// Until, when set, ends the window with the last message stored at or before it.
	Until time.Time
}

// past reports whether a message lies beyond the window's end.
func (w Window) past(seq uint64, stored time.Time) bool {
	return (w.UntilSeq > 0 && seq > w.UntilSeq) || (!w.Until.IsZero() && stored.After(w.Until))
}

// ReplayOptions select the events Replay returns.
type ReplayOptions struct {
	Window
	// Subjects narrow the events (nil: every resource event); see domain.SubjectFilter.
	// JetStream refuses overlapping filters.
	Subjects []string
	// Limit is the most events returned; it must be positive unless Newest is set.
	Limit int
	// Newest, when positive, asks for the newest Newest events of the window
	// instead of the oldest Limit (which is then not used). They are read
	// backwards from the window's end, not from its start; more is false.
	Newest int
}

// Replay returns up to opts.Limit events of the window in stream order. It
// reads what the stream holds now and never waits for new events (FollowFrom
// does). more says matching events follow the last one returned; resume after
// its sequence. With opts.Newest it returns the newest opts.Newest events of
// the window, still in stream order, and more is false: the events before
// them end with the first one's sequence - 1.
func (s *Store) Replay(ctx context.Context, opts ReplayOptions) (recs []*Record, more bool, err error) {
	if opts.Newest != 0 {
		recs, _, err = s.replayNewest(ctx, opts)
		return recs, false, err
	}
	if opts.Limit <= 0 {
		return nil, false, fmt.Errorf("replaying %s: limit must be positive, got %d", StreamName, opts.Limit)
	}
	err = scan(ctx, s.js, StreamName, opts.Window, opts.Subjects, func(m scanned) (bool, error) {
		rec, err := decodeRecord(s.seen, m.msg.Subject(), m.seq, m.msg.Headers(), m.msg.Data())
		if err != nil {
			s.dead.record(StreamName, m.seq, m.msg.Subject(), m.msg.Data(), err)
			return true, nil
		}
		recs = append(recs, rec)
		if len(recs) == opts.Limit {
			more = m.pending > 0
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("replaying %s: %w", StreamName, err)
	}
	return recs, more, nil
}

// replayNewest is Replay with opts.Newest; it also says how many backwards
// rounds it took.
func (s *Store) replayNewest(ctx context.Context, opts ReplayOptions) ([]*Record, int, error) {
	recs, rounds, err := newest(ctx, s.js, StreamName, opts.Window, opts.Subjects, opts.Newest, func(m scanned) (*Record, bool, error) {
		rec, err := decodeRecord(s.seen, m.msg.Subject(), m.seq, m.msg.Headers(), m.msg.Data())
		if err != nil {
			s.dead.record(StreamName, m.seq, m.msg.Subject(), m.msg.Data(), err)
			return nil, false, nil
		}
		return rec, true, nil
	})
	if err != nil {
		return nil, rounds, fmt.Errorf("replaying the newest of %s: %w", StreamName, err)
	}
	return recs, rounds, nil
}

// FollowFrom is Follow starting at a position: after a sequence, or at the
// first event stored at or after a time. It follows new events until Stop.
func (s *Store) FollowFrom(ctx context.Context, from Position, subjects []string) (*Cursor, error) {
	cons, it, err := followStream(ctx, s.js, StreamName, from, subjects)
	if err != nil {
		return nil, err
	}
	return &Cursor{cons: cons, it: it, dead: s.dead, seen: s.seen}, nil
}

// followStream opens an ordered consumer on stream at a position and starts
// pulling from it, a bounded number of messages ahead.
func followStream(ctx context.Context, js jetstream.JetStream, stream string, from Position, subjects []string) (jetstream.Consumer, jetstream.MessagesContext, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects}
	var seq uint64
	cfg.DeliverPolicy, seq, cfg.OptStartTime = from.deliver()
	if cfg.DeliverPolicy == jetstream.DeliverByStartSequencePolicy {
		cfg.OptStartSeq = seq
	}
	var cons jetstream.Consumer
	err := retryUnavailable(ctx, func() error {
		var err error
		cons, err = js.OrderedConsumer(ctx, stream, cfg)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating ordered consumer on %s: %w", stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return nil, nil, fmt.Errorf("starting ordered consumer on %s: %w", stream, err)
	}
	return cons, it, nil
}

// scanned is one message as scan hands it over.
type scanned struct {
	msg    jetstream.Msg
	seq    uint64
	stored time.Time
	// pending counts the matching messages behind this one.
	pending uint64
}

// scanBatch is how many messages one pull of a scan asks for.
const scanBatch = 512

// scan reads the window of a stream in order through a short-lived pull
// consumer and hands each message to visit, until visit says stop, the
// window ends or the stream has nothing more. Unlike an ordered consumer's
// iterator it never waits for messages that are not there yet, which is
// what a bounded read wants.
func scan(ctx context.Context, js jetstream.JetStream, stream string, w Window, subjects []string, visit func(scanned) (bool, error)) error {
	batch := scanBatch
	if w.From.Time.IsZero() && w.UntilSeq > w.From.After && w.UntilSeq-w.From.After < scanBatch {
		// A short window: a pull need not fetch (much) past its end.
		batch = int(w.UntilSeq - w.From.After)
	}
	return scanBatched(ctx, js, stream, w, subjects, batch, visit)
}

// scanBatched is scan pulling batch messages at a time.
func scanBatched(ctx context.Context, js jetstream.JetStream, stream string, w Window, subjects []string, batch int, visit func(scanned) (bool, error)) error {
	cfg := jetstream.ConsumerConfig{
		AckPolicy:      jetstream.AckNonePolicy,
		FilterSubjects: subjects,
		MemoryStorage:  true,
		Replicas:       1,
		// Removed by the server if this process dies before deleting it.
		InactiveThreshold: time.Minute,
	}
	var seq uint64
	cfg.DeliverPolicy, seq, cfg.OptStartTime = w.From.deliver()
	if cfg.DeliverPolicy == jetstream.DeliverByStartSequencePolicy {
		cfg.OptStartSeq = seq
	}
	var cons jetstream.Consumer
	err := retryUnavailable(ctx, func() error {
		var err error
		cons, err = js.CreateConsumer(ctx, stream, cfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("creating consumer: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
	}()
	if err := awaitCurrentHost(ctx, js, stream, cons.CachedInfo()); err != nil {
		return err
	}
	// A pull consumer just created in a cluster may not be served on its
	// host yet: a pull then finds no responders (CI: a replay through a
	// node that had just restarted). Nothing was delivered to such a pull,
	// so it is asked again, for about 10s at most.
	var since time.Time
	backoff := 5 * time.Millisecond
	again := func(err error) bool {
		if !errors.Is(err, nats.ErrNoResponders) {
			return false
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) > 10*time.Second || sleepCtx(ctx, backoff) != nil {
			return false
		}
		backoff = min(backoff*2, time.Second)
		return true
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		msgs, err := cons.FetchNoWait(batch)
		if err != nil {
			if again(err) {
				continue
			}
			return fmt.Errorf("fetching: %w", err)
		}
		n := 0
		for msg := range msgs.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("reading message metadata: %w", err)
			}
			if w.past(md.Sequence.Stream, md.Timestamp) {
				return nil
			}
			more, err := visit(scanned{msg: msg, seq: md.Sequence.Stream, stored: md.Timestamp, pending: md.NumPending})
			if err != nil || !more {
				return err
			}
		}
		if err := msgs.Error(); err != nil {
			if n == 0 && again(err) {
				continue
			}
			return fmt.Errorf("fetching: %w", err)
		}
		if n == 0 {
			return nil
		}
	}
}

// hostLagLimit bounds how long a read waits for the replica hosting its
// consumer to catch up with the stream's leader.
var hostLagLimit = 10 * time.Second

// awaitCurrentHost waits until the server hosting a read's consumer holds the
// stream as its leader does. In a cluster, JetStream places a single-replica
// consumer on any replica of the stream, one that has just restarted and is
// still catching up too, and a scan ends where that replica's copy ends: a
// history or audit query would answer a shorter window than the stream holds,
// without saying so. On a single server, or on the leader, there is nothing
// to wait for. A replica behind for longer than hostLagLimit makes the read
// fail as unavailable (the client retries) rather than answer short.
func awaitCurrentHost(ctx context.Context, js jetstream.JetStream, stream string, ci *jetstream.ConsumerInfo) error {
	if ci == nil || ci.Cluster == nil || ci.Cluster.Leader == "" || ci.Cluster.Name == "" && ci.Cluster.RaftGroup == "" {
		return nil // a single server
	}
	host := ci.Cluster.Leader
	deadline := time.Now().Add(hostLagLimit)
	for {
		var info *jetstream.StreamInfo
		err := retryUnavailable(ctx, func() error {
			s, err := js.Stream(ctx, stream)
			if err == nil {
				info = s.CachedInfo()
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("reading the stream's replicas: %w", err)
		}
		if hostIsCurrent(info.Cluster, host) {
			return nil
		}
		if time.Now().After(deadline) {
			return &domain.Error{Reason: domain.ReasonServiceUnavailable, RetryAfterSeconds: 2,
				Message: fmt.Sprintf("the replica %s that would serve this read has been behind the stream's leader for %s; retry", host, hostLagLimit)}
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// hostIsCurrent says whether host holds the stream as its leader does, by
// the leader's view of its replicas (c).
func hostIsCurrent(c *jetstream.ClusterInfo, host string) bool {
	if c == nil || len(c.Replicas) == 0 || c.Leader == host {
		return true // a single server, a single replica, or the leader
	}
	for _, r := range c.Replicas {
		if r.Name == host {
			return r.Current && r.Lag == 0 && !r.Offline
		}
	}
	return false // not a replica the leader knows: a new one, not caught up
}
