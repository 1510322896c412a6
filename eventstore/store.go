package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// StreamName is the JetStream stream that holds every resource event.
const StreamName = "REZUS_EVENTS"

// Header names set on every appended event.
const (
	HeaderEventType = "Rezus-Event-Type"
	headerMsgID     = "Nats-Msg-Id"
	headerExpected  = "Nats-Expected-Last-Subject-Sequence"
)

// DefaultMaxWatches is how many consumers of the event stream API watches and
// follows may hold unless configured (handlers.Config.MaxWatches says the same).
const DefaultMaxWatches = 1024

// InternalConsumerReserve is how many consumers of the event stream are kept
// for the server's own work beyond MaxWatches: the projector, the read-model
// cache, the tenant finalizer and the change feeds of the controllers (apply
// worker, upgrade saga, config sync, PKI), their durable consumers, and the
// short-lived ones of replays (/api/v1/events pages, read barriers). A
// running server at rest holds five (the durables of the apply worker, the
// upgrade saga and config sync; the ordered consumers of the cache and the
// projector: listed in a test server by TestInternalConsumersFitTheReserve,
// which fails when they outgrow a quarter of the reserve), change feeds and
// replays a few more for moments, each further replica on the same stream as
// many again; 128 leaves room for several replicas and bursts of replays. Watches are refused (429) at MaxWatches, so
// however many a client opens, these stay free.
const InternalConsumerReserve = 128

// Config configures the store. The zero value is usable.
type Config struct {
	// MaxWatches is how many consumers the API's watches and follows may hold
	// on the event stream (handlers.Config.MaxWatches); the stream's
	// MaxConsumers is MaxWatches + InternalConsumerReserve, set on every start.
	// Default DefaultMaxWatches.
	MaxWatches int
	// Replicas of the stream and buckets: 1 (default) on a single server, 3 on a cluster.
	Replicas int
	// DuplicateWindow is how long an Idempotency-Key is remembered; default 2 minutes.
	DuplicateWindow time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Schema is the storage schema level appends are written at (the
	// lowest every running replica reads); nil means domain.SchemaLevel, the
	// right level for a single replica and for tests.
	Schema SchemaLevels
	// Release is this replica's release (e.g. "0.2.0"), named when a
	// record written by a newer one is refused; default "this release".
	Release string
	// AsyncAckTimeout bounds the wait for the acknowledgement of an
	// asynchronous publish (the projector's writes, backups' chunks); default
	// DefaultAsyncAckTimeout. Without it nats.go waits for ever, and an ack
	// lost while a stream changes leader (a rolling restart) stalled the
	// projector with its lease held: every replica started after that stayed
	// "projections catching up".
	AsyncAckTimeout time.Duration
}

// DefaultAsyncAckTimeout is Config.AsyncAckTimeout's default: far above an
// ack's usual milliseconds on a loaded machine, short of a readiness probe's
// patience.
const DefaultAsyncAckTimeout = 10 * time.Second

func (c *Config) setDefaults() {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxWatches == 0 {
		c.MaxWatches = DefaultMaxWatches
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.AsyncAckTimeout == 0 {
		c.AsyncAckTimeout = DefaultAsyncAckTimeout
	}
}

// Store appends and reads domain events.
type Store struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream

	appended  atomic.Uint64
	conflicts atomic.Uint64
	dead      *deadLetters

	shared sharedEvents
	// seen says whether a record or replica of a newer schema level was met.
	seen *schemaSeen
}

// Open provisions the event stream (idempotently; an existing stream gets the
// configured consumer limit) on the connection and returns the store.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	cfg.setDefaults()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.AsyncAckTimeout))
	if err != nil {
		return nil, fmt.Errorf("opening jetstream: %w", err)
	}
	js = forCluster(nc, js)
	var stream jetstream.Stream
	err = retryUnavailable(ctx, func() error {
		var err error
		stream, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        StreamName,
			Description: "RezusCloud resource events: the system of record",
			Subjects:    []string{domain.SubjectPrefix + ".>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DuplicateWindow,
			AllowDirect: true,
			MaxMsgSize:  1 << 20 * 2,
			// Explicit, so a full set of watches never takes the consumers
			// the server's own work needs (JetStream's default is 1000 for all).
			MaxConsumers: cfg.MaxWatches + InternalConsumerReserve,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning stream %s: %w", StreamName, err)
	}
	if err := provisionDeadLetters(ctx, js, cfg.Replicas); err != nil {
		return nil, fmt.Errorf("provisioning stream %s: %w", DeadLetterStream, err)
	}
	return &Store{cfg: cfg, nc: nc, js: js, stream: stream, dead: &deadLetters{js: js, log: cfg.Logger}, seen: &schemaSeen{}}, nil
}

// JetStream returns the JetStream handle, for packages that keep their own
// buckets and consumers next to the stream.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Conn returns the NATS connection.
func (s *Store) Conn() *nats.Conn { return s.nc }

// Replicas is the replica count buckets should use.
func (s *Store) Replicas() int { return s.cfg.Replicas }

// Appended is the number of events this process appended.
func (s *Store) Appended() uint64 { return s.appended.Load() }

// Conflicts is the number of appends JetStream refused as stale.
func (s *Store) Conflicts() uint64 { return s.conflicts.Load() }

// Record is one stored event with its stream position.
type Record struct {
	Seq     uint64
	Subject string
	MsgID   string
	Event   *domain.Event
	// Pending is set by cursors: matching events still behind this one.
	Pending uint64
}

// State is the object the record leaves behind: nil after a deletion.
func (r *Record) State() *domain.Object { return domain.Evolve(nil, r.Event, r.Seq) }

// decodeRecord decodes a stored event and brings it to this build's schema
// level (one above it is kept as written, and noted in seen).
func decodeRecord(seen *schemaSeen, subject string, seq uint64, hdr nats.Header, data []byte) (*Record, error) {
	ev := &domain.Event{}
	if err := json.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("decoding event %d on %s: %w", seq, subject, err)
	}
	if ev.Object == nil {
		return nil, fmt.Errorf("event %d on %s has no object", seq, subject)
	}
	if err := readEvent(seen, ev); err != nil {
		return nil, fmt.Errorf("event %d on %s: %w", seq, subject, err)
	}
	return &Record{Seq: seq, Subject: subject, MsgID: hdr.Get(headerMsgID), Event: ev}, nil
}

// Load returns the aggregate's last event, or nil when it never existed.
func (s *Store) Load(ctx context.Context, ref domain.Ref) (*Record, error) {
	var msg *jetstream.RawStreamMsg
	err := retryUnavailable(ctx, func() error {
		var err error
		if s.cfg.Replicas > 1 {
			// A load decides a write: a direct get, which a replica
			// that has not applied an acknowledged write answers too,
			// broke read-after-write after a failover (leaderLastMsg).
			msg, err = leaderLastMsg(ctx, s.nc, StreamName, ref.Subject())
		} else {
			msg, err = s.stream.GetLastMsgForSubject(ctx, ref.Subject())
		}
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", ref, err)
	}
	rec, err := decodeRecord(s.seen, msg.Subject, msg.Sequence, msg.Header, msg.Data)
	if err != nil {
		// The aggregate's last record is poison: readers skip it, but a
		// write cannot know what it would follow. Kept and said.
		s.dead.record(StreamName, msg.Sequence, msg.Subject, msg.Data, err)
		return nil, fmt.Errorf("loading %s: its last record cannot be decoded (kept in %s): %w", ref, DeadLetterStream, err)
	}
	return rec, nil
}

// Get returns the event at a stream sequence.
func (s *Store) Get(ctx context.Context, seq uint64) (*Record, error) {
	if seq == 0 {
		return nil, domain.NewGone("there is no event 0; sequences start at 1")
	}
	msg, err := s.stream.GetMsg(ctx, seq)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, domain.NewGone(fmt.Sprintf("event %d is not in the stream", seq))
		}
		return nil, fmt.Errorf("reading event %d: %w", seq, err)
	}
	return decodeRecord(s.seen, msg.Subject, msg.Sequence, msg.Header, msg.Data)
}

// Bounds returns the first and last sequence in the stream (0, 0 when empty).
// A stream that does not answer in time (its leader is being elected, or
// the cluster is loaded: jetstream's own deadline passes while ctx lives)
// is retried, then answered as ServiceUnavailable, which a client retries;
// it used to surface as an internal error, ending a watch with a 500.
func (s *Store) Bounds(ctx context.Context) (first, last uint64, err error) {
	err = retry(ctx, func() error {
		info, err := s.stream.Info(ctx)
		if err != nil {
			return err
		}
		first, last = info.State.FirstSeq, info.State.LastSeq
		return nil
	}, func(err error) bool {
		return temporarilyUnavailable(err) || (timedOut(err) && ctx.Err() == nil)
	})
	if err != nil && !errors.Is(ctx.Err(), context.Canceled) && (temporarilyUnavailable(err) || timedOut(err)) {
		return 0, 0, &domain.Error{Reason: domain.ReasonServiceUnavailable, RetryAfterSeconds: 2,
			Message: "the event stream does not answer now (its leader is being elected?): " + err.Error()}
	}
	return first, last, err
}

// Append publishes events for one aggregate whose last event has sequence
// expected (0: no event yet). JetStream refuses the append if another writer got
// there first; that comes back as a domain Conflict. msgID, when set, makes a
// retried append a no-op that returns the first append's sequence.
//
// Each event is written at the store's schema level (Config.Schema): its
// object without what a lower level does not know, and the level stamped.
// events are changed in place to what was written, so the caller's result
// is what every replica reads back.
func (s *Store) Append(ctx context.Context, ref domain.Ref, expected uint64, msgID string, events ...domain.Event) (seq uint64, duplicate bool, err error) {
	if err := checkFence(ctx); err != nil {
		return 0, false, err
	}
	subject := ref.Subject()
	level := s.writeLevel()
	for i := range events {
		if err := atLevel(&events[i], level); err != nil {
			return 0, false, fmt.Errorf("encoding %s: %w", events[i].Type, err)
		}
		data, err := json.Marshal(&events[i])
		if err != nil {
			return 0, false, fmt.Errorf("encoding %s: %w", events[i].Type, err)
		}
		msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		msg.Header.Set(headerExpected, strconv.FormatUint(expected, 10))
		msg.Header.Set(HeaderEventType, events[i].Type)
		if msgID != "" {
			id := msgID
			if i > 0 {
				id = msgID + "#" + strconv.Itoa(i)
			}
			msg.Header.Set(headerMsgID, id)
		}
		var ack *jetstream.PubAck
		err = retryWrite(ctx, func() error {
			var err error
			ack, err = s.js.PublishMsg(ctx, msg)
			return err
		})
		if err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
				apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
				s.conflicts.Add(1)
				return 0, false, domain.NewConflict(ref.Kind, ref.Name, "the object has been modified; please apply your changes to the latest version and try again")
			}
			return 0, false, fmt.Errorf("appending %s to %s: %w", events[i].Type, subject, err)
		}
		if ack.Duplicate {
			return ack.Sequence, true, nil
		}
		s.appended.Add(1)
		expected, seq = ack.Sequence, ack.Sequence
	}
	return seq, false, nil
}

// UpdateOptions tune Update.
type UpdateOptions struct {
	// MsgID is the idempotency key of the request; a retry with the same key
	// returns the first result instead of applying the command again.
	MsgID string
	// Retries is how many times a conflicting append is re-decided on fresh state;
	// 0 returns the conflict (what a PUT carrying a resourceVersion wants).
	Retries int
	// Hint, when set, supplies a cached state to decide on instead of loading it
	// from the stream. The append's expected sequence proves the hint current; if
	// it was stale (or deciding on it failed), Update loads and decides again, so
	// a hint saves a round trip and never changes an answer. Not used with MsgID.
	Hint StateHint
}

// StateHint is a cache of aggregate states.
type StateHint interface {
	// Peek returns the cached state (nil when absent) and its last event's sequence (0 when absent).
	Peek(ref domain.Ref) (*domain.Object, uint64)
}

// Result is the outcome of Update.
type Result struct {
	// Object is the state after the command (nil when it deleted the object), with its resourceVersion.
	Object *domain.Object
	// Last is the post-image of the last event (also set for deletions).
	Last *domain.Object
	// Seq is the stream sequence of the object's last event.
	Seq uint64
	// Events are the events appended (none for a no-op or a duplicate).
	Events []domain.Event
	// Duplicate is true when the idempotency key had been applied already.
	Duplicate bool
}

// Update loads an aggregate, lets decide turn its state into events, and appends
// them with the loaded sequence as the expected one, so the store owns load,
// concurrency and save. decide may run more than once (see Retries).
func (s *Store) Update(ctx context.Context, ref domain.Ref, opts UpdateOptions, decide func(state *domain.Object) ([]domain.Event, error)) (Result, error) {
	// A cached state does not say which schema level wrote it: once a
	// newer release is known to write here, every write loads its record.
	hinted := opts.Hint != nil && opts.MsgID == "" && !s.seen.met()
	for attempt := 0; ; {
		var state *domain.Object
		var lastSeq uint64
		if hinted {
			state, lastSeq = opts.Hint.Peek(ref)
		} else {
			rec, err := s.Load(ctx, ref)
			if err != nil {
				return Result{}, err
			}
			if rec != nil {
				state, lastSeq = rec.State(), rec.Seq
				if opts.MsgID != "" && rec.MsgID == opts.MsgID {
					return recordResult(rec, true), nil
				}
				// A rewrite would drop what this build does not know.
				if err := s.refuseNewer(ref, rec); err != nil {
					return Result{}, err
				}
			}
		}
		events, err := decide(state)
		if err == nil && s.unchangedAtLevel(state, events) {
			events = nil
		}
		if hinted && (err != nil || len(events) == 0) {
			// Only a successful append proves the hint was current; answer
			// errors and no-ops from the stream's own state.
			hinted = false
			continue
		}
		if err != nil {
			return Result{}, err
		}
		if len(events) == 0 {
			return Result{Object: state, Last: state, Seq: lastSeq}, nil
		}
		seq, dup, err := s.Append(ctx, ref, lastSeq, opts.MsgID, events...)
		if domain.IsConflict(err) {
			if hinted {
				hinted = false
				continue
			}
			if attempt < opts.Retries {
				attempt++
				// Writers that collided would collide again in lockstep; spread them.
				if err := sleepCtx(ctx, jitter(attempt)); err != nil {
					return Result{}, err
				}
				continue
			}
			// The conflict may be our own earlier attempt with the same key.
			if opts.MsgID != "" {
				if rec, lerr := s.Load(ctx, ref); lerr == nil && rec != nil && rec.MsgID == opts.MsgID {
					return recordResult(rec, true), nil
				}
			}
			return Result{}, err
		}
		if err != nil {
			return Result{}, err
		}
		if dup {
			rec, err := s.Get(ctx, seq)
			if err != nil {
				return Result{}, err
			}
			return recordResult(rec, true), nil
		}
		last := events[len(events)-1]
		img := last.Object.DeepCopy()
		img.Metadata.ResourceVersion = strconv.FormatUint(seq, 10)
		res := Result{Last: img, Seq: seq, Events: events}
		if last.Action != domain.ActionDeleted {
			res.Object = img
		}
		return res, nil
	}
}

func recordResult(rec *Record, dup bool) Result {
	img := rec.Event.Object.DeepCopy()
	img.Metadata.ResourceVersion = strconv.FormatUint(rec.Seq, 10)
	return Result{Object: rec.State(), Last: img, Seq: rec.Seq, Duplicate: dup}
}

// jitter is a random backoff growing with the attempt: 0.5..1ms, 1..2ms, ... capped at 64ms.
func jitter(attempt int) time.Duration {
	base := time.Millisecond << min(attempt, 6)
	return base/2 + rand.N(base/2)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryWrite retries a publish only when it surely did not reach the stream
// (no responders, a 503 answer); a timeout may have been stored, and retrying it
// would conflict with our own write.
func retryWrite(ctx context.Context, op func() error) error {
	return retry(ctx, op, func(err error) bool {
		var apiErr *jetstream.APIError
		return errors.Is(err, nats.ErrNoResponders) || (errors.As(err, &apiErr) && apiErr.Code == 503)
	})
}

// retryUnavailable retries what JetStream answers while it is electing a leader
// or starting: no responders, timeouts and 503s. Only for reads and idempotent
// requests.
func retryUnavailable(ctx context.Context, op func() error) error {
	return retry(ctx, op, temporarilyUnavailable)
}

// retry runs op until it succeeds, fails in a way retryable does not accept,
// ctx ends, or about 10s have passed, backing off from 5ms to 1s.
func retry(ctx context.Context, op func() error, retryable func(error) bool) error {
	backoff := 5 * time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := op()
		if err == nil || !retryable(err) || time.Now().After(deadline) {
			return err
		}
		if sleepCtx(ctx, backoff) != nil {
			return err
		}
		backoff = min(backoff*2, time.Second)
	}
}

func temporarilyUnavailable(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		return true
	}
	var apiErr *jetstream.APIError
	var leaderErr *apiError // leaderLastMsg's
	// nats.go's own type, which a KV watch's ordered consumer returns
	// ("nats: JetStream system temporarily unavailable" ended a replica
	// cut off from its quorum: its module validator's queue watch).
	var natsErr *nats.APIError
	return (errors.As(err, &apiErr) && apiErr.Code == 503) || (errors.As(err, &leaderErr) && leaderErr.Code == 503) ||
		(errors.As(err, &natsErr) && natsErr.Code == 503)
}

// Execute runs a domain command: load, Decide, append.
func (s *Store) Execute(ctx context.Context, cmd domain.Command, opts UpdateOptions) (Result, error) {
	return s.Update(ctx, cmd.Ref, opts, func(state *domain.Object) ([]domain.Event, error) {
		return domain.Decide(state, cmd)
	})
}
