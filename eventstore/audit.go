package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// AuditStreamName is the JetStream stream holding the audit trail. It is
// separate from the event stream: it has its own retention, and automation
// users who may read resource events must not read it.
const AuditStreamName = "REZUS_AUDIT"

// AuditSubjectPrefix starts every audit subject: rezus.audit.<kind>.<tenant>.
const AuditSubjectPrefix = "rezus.audit"

// DefaultAuditRetention is how long audit records are kept unless configured.
const DefaultAuditRetention = 90 * 24 * time.Hour

// DefaultAuditMaxBytes bounds the audit stream's size unless configured.
const DefaultAuditMaxBytes = 1 << 30

// minAuditMaxBytes is the smallest size bound that makes sense: it holds
// some thousands of records.
const minAuditMaxBytes = 1 << 20

// AuditConfig configures the audit log. The zero value is usable.
type AuditConfig struct {
	// Retention is how long records are kept (the stream's MaxAge); default 90 days.
	Retention time.Duration
	// MaxBytes bounds the stream's size: beyond it the oldest records are
	// discarded, whatever their age. Default DefaultAuditMaxBytes (1 GiB);
	// at least 1 MiB.
	MaxBytes int64
	// MaxPending bounds records sent but not yet acknowledged by JetStream;
	// default 4096. Beyond it Append waits up to StallWait, then drops the
	// record (logging it in full).
	MaxPending int
	// StallWait is how long Append may wait for room; default 200ms.
	StallWait time.Duration
	// AckTimeout is how long a record may go unacknowledged before it is
	// logged as not stored; default 10s.
	AckTimeout time.Duration
	// Logger receives records that could not be stored; nil means the store's logger.
	Logger *slog.Logger
}

// Validate reports settings that make no sense.
func (c AuditConfig) Validate() error {
	switch {
	case c.Retention < 0:
		return fmt.Errorf("audit retention must not be negative, got %s", c.Retention)
	case c.Retention > 0 && c.Retention < time.Minute:
		return fmt.Errorf("audit retention must be at least a minute, got %s", c.Retention)
	case c.MaxBytes < 0:
		return fmt.Errorf("audit max bytes must not be negative, got %d", c.MaxBytes)
	case c.MaxBytes > 0 && c.MaxBytes < minAuditMaxBytes:
		return fmt.Errorf("audit max bytes must be at least %d (1 MiB), got %d", minAuditMaxBytes, c.MaxBytes)
	case c.MaxPending < 0:
		return fmt.Errorf("audit max pending must not be negative, got %d", c.MaxPending)
	case c.StallWait < 0, c.AckTimeout < 0:
		return errors.New("audit stall wait and ack timeout must not be negative")
	}
	return nil
}

func (c *AuditConfig) setDefaults(s *Store) {
	if c.Retention == 0 {
		c.Retention = DefaultAuditRetention
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultAuditMaxBytes
	}
	if c.MaxPending == 0 {
		c.MaxPending = 4096
	}
	if c.StallWait == 0 {
		c.StallWait = 200 * time.Millisecond
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = s.cfg.Logger
	}
}

// AuditRecord is one entry of the audit trail (the type lives in domain so
// readers of the API, the web UI and the CLI, share it).
type AuditRecord = domain.AuditRecord

// AuditSubject is where a record is stored: rezus.audit.<kind token>.<tenant>,
// "_" standing in for a missing kind or tenant, so kind and tenant filters
// are subject filters.
func AuditSubject(r *AuditRecord) string {
	return AuditSubjectPrefix + "." + orScope(AuditKindToken(r.Kind)) + "." + orScope(auditToken(r.Tenant))
}

// AuditKindToken is the subject token of a kind: the domain kind's subject
// token for a resource kind (Kind name, plural or token), otherwise the
// lower-cased kind when it is a valid token, otherwise "".
func AuditKindToken(kind string) string {
	if kind == "" {
		return ""
	}
	if k, ok := domain.LookupKind(kind); ok {
		return k.Subject
	}
	return auditToken(strings.ToLower(kind))
}

// AuditFilter is the subject filter for records of a kind and tenant; ""
// matches any. The kind is anything AuditKindToken accepts.
func AuditFilter(kind, tenant string) string {
	k, t := "*", "*"
	if kind != "" {
		k = orScope(AuditKindToken(kind))
	}
	if tenant != "" {
		t = orScope(auditToken(tenant))
	}
	return AuditSubjectPrefix + "." + k + "." + t
}

// auditToken returns s when it can be a subject token (a DNS-1123 label,
// the rule names follow), else "". Values come from request paths and must
// not be able to add tokens or wildcards to a subject.
func auditToken(s string) string {
	if s == "" || domain.ValidateName(s, "") != nil {
		return ""
	}
	return s
}

func orScope(token string) string {
	if token == "" {
		return domain.ClusterScope
	}
	return token
}

// errAuditClosed is why records appended after Close are not stored.
var errAuditClosed = errors.New("the audit log is closed")

// AuditLog appends audit records without making the caller wait for
// JetStream, and reads them back.
type AuditLog struct {
	cfg    AuditConfig
	js     jetstream.JetStream
	stream jetstream.Stream
	dead   *deadLetters
	closed atomic.Bool
	lost   atomic.Uint64
}

// OpenAudit provisions the audit stream (idempotently; a changed retention or
// size bound is applied to the existing stream) and returns the log.
func OpenAudit(ctx context.Context, s *Store, cfg AuditConfig) (*AuditLog, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults(s)
	l := &AuditLog{cfg: cfg, dead: s.dead}
	// A JetStream context of its own: the async-publish options and the
	// pending acknowledgements belong to the audit log alone.
	js, err := jetstream.New(s.nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			l.drop(m.Subject, m.Data, err)
		}))
	if err != nil {
		return nil, fmt.Errorf("opening jetstream for the audit log: %w", err)
	}
	js = forCluster(s.nc, js)
	l.js = js
	err = retryUnavailable(ctx, func() error {
		var err error
		l.stream, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        AuditStreamName,
			Description: "RezusCloud audit trail: every mutating request and credential download",
			Subjects:    []string{AuditSubjectPrefix + ".>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			MaxAge:      cfg.Retention,
			// Bounded in size too: an age alone lets a flood fill the disk.
			MaxBytes:   cfg.MaxBytes,
			Replicas:   s.cfg.Replicas,
			MaxMsgSize: 64 << 10,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning stream %s: %w", AuditStreamName, err)
	}
	return l, nil
}

// Retention is how long records are kept.
func (l *AuditLog) Retention() time.Duration { return l.cfg.Retention }

// Lost counts records that could not be stored (each was logged in full).
func (l *AuditLog) Lost() uint64 { return l.lost.Load() }

// Append stores a record asynchronously: it returns at once (or after at
// most StallWait when MaxPending records are unacknowledged) and never
// fails the caller. A record JetStream does not take is logged at error
// level with its content, so it is not lost without a trace. Flush waits
// for what was appended.
func (l *AuditLog) Append(rec AuditRecord) {
	rec.Seq = 0
	subject := AuditSubject(&rec)
	data, err := json.Marshal(rec)
	if err != nil {
		l.drop(subject, nil, fmt.Errorf("encoding the record: %w", err))
		return
	}
	if l.closed.Load() {
		l.drop(subject, data, errAuditClosed)
		return
	}
	_, err = l.js.PublishAsync(subject, data,
		jetstream.WithExpectStream(AuditStreamName), jetstream.WithStallWait(l.cfg.StallWait))
	if err != nil {
		l.drop(subject, data, err)
	}
}

func (l *AuditLog) drop(subject string, data []byte, err error) {
	l.lost.Add(1)
	l.cfg.Logger.Error("audit record not stored", "subject", subject, "record", string(data), "err", err)
}

// Flush waits until JetStream has acknowledged (or refused, which is logged)
// every record appended so far, or ctx ends.
func (l *AuditLog) Flush(ctx context.Context) error {
	select {
	case <-l.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flushing the audit log with %d records unacknowledged: %w", l.js.PublishAsyncPending(), ctx.Err())
	}
}

// Close flushes the log; records appended afterwards are only logged. Call
// it after the HTTP server has finished its in-flight requests and before
// the NATS connection is drained.
func (l *AuditLog) Close(ctx context.Context) error {
	l.closed.Store(true)
	return l.Flush(ctx)
}

// AuditQuery selects audit records.
type AuditQuery struct {
	Window
	// Kind narrows to one kind (anything AuditKindToken accepts); "" is any.
	Kind string
	// Tenant narrows to one tenant, the tenant's own records included; "" is any.
	Tenant string
	// Actor, when set, keeps only that identity's records.
	Actor string
	// Limit is the most records returned; it must be positive unless Newest is set.
	Limit int
	// Newest, when positive, asks Query for the newest Newest matching
	// records of the window instead of the oldest Limit (which is then not
	// used). They are read backwards from the window's end; more is false.
	Newest int
}

func (q AuditQuery) subjects() []string {
	if q.Kind == "" && q.Tenant == "" {
		return nil
	}
	return []string{AuditFilter(q.Kind, q.Tenant)}
}

// Query returns up to q.Limit matching records in stream (time) order,
// reading what the stream holds now. more says records behind the last one
// returned may match too; resume after its Seq. With q.Newest it returns the
// newest q.Newest matching records of the window, still in stream order,
// and more is false: the records before them end with the first one's Seq - 1.
func (l *AuditLog) Query(ctx context.Context, q AuditQuery) (recs []AuditRecord, more bool, err error) {
	if q.Newest != 0 {
		recs, _, err = l.queryNewest(ctx, q)
		return recs, false, err
	}
	if q.Limit <= 0 {
		return nil, false, fmt.Errorf("querying %s: limit must be positive, got %d", AuditStreamName, q.Limit)
	}
	recs = []AuditRecord{}
	err = scan(ctx, l.js, AuditStreamName, q.Window, q.subjects(), func(m scanned) (bool, error) {
		rec, err := decodeAudit(m.msg.Data(), m.seq)
		if err != nil {
			l.dead.record(AuditStreamName, m.seq, m.msg.Subject(), m.msg.Data(), err)
			return true, nil
		}
		if q.Actor != "" && rec.Actor != q.Actor {
			return true, nil
		}
		recs = append(recs, rec)
		if len(recs) == q.Limit {
			more = m.pending > 0
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("querying %s: %w", AuditStreamName, err)
	}
	return recs, more, nil
}

// queryNewest is Query with q.Newest; it also says how many backwards rounds
// it took. The actor filter is applied as the records are read, so rounds
// go on until enough records of the actor are found.
func (l *AuditLog) queryNewest(ctx context.Context, q AuditQuery) ([]AuditRecord, int, error) {
	recs, rounds, err := newest(ctx, l.js, AuditStreamName, q.Window, q.subjects(), q.Newest, func(m scanned) (AuditRecord, bool, error) {
		rec, err := decodeAudit(m.msg.Data(), m.seq)
		if err != nil {
			l.dead.record(AuditStreamName, m.seq, m.msg.Subject(), m.msg.Data(), err)
			return AuditRecord{}, false, nil
		}
		return rec, q.Actor == "" || rec.Actor == q.Actor, nil
	})
	if err != nil {
		return nil, rounds, fmt.Errorf("querying the newest of %s: %w", AuditStreamName, err)
	}
	return recs, rounds, nil
}

// AuditCursor reads audit records in order and follows new ones.
type AuditCursor struct {
	it    jetstream.MessagesContext
	actor string
	dead  *deadLetters
}

// Follow returns a cursor over the records matching q (its Window's end and
// Limit are not used) from q.From on, following new records until Stop.
func (l *AuditLog) Follow(ctx context.Context, q AuditQuery) (*AuditCursor, error) {
	_, it, err := followStream(ctx, l.js, AuditStreamName, q.From, q.subjects())
	if err != nil {
		return nil, err
	}
	return &AuditCursor{it: it, actor: q.Actor, dead: l.dead}, nil
}

// Next blocks for the next matching record.
func (c *AuditCursor) Next(ctx context.Context) (AuditRecord, error) {
	for {
		msg, err := c.it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return AuditRecord{}, ctx.Err()
			}
			return AuditRecord{}, err
		}
		md, err := msg.Metadata()
		if err != nil {
			return AuditRecord{}, fmt.Errorf("reading message metadata: %w", err)
		}
		rec, err := decodeAudit(msg.Data(), md.Sequence.Stream)
		if err != nil {
			c.dead.record(AuditStreamName, md.Sequence.Stream, msg.Subject(), msg.Data(), err)
			continue
		}
		if c.actor == "" || rec.Actor == c.actor {
			return rec, nil
		}
	}
}

// Stop ends the cursor.
func (c *AuditCursor) Stop() { c.it.Stop() }

func decodeAudit(data []byte, seq uint64) (AuditRecord, error) {
	var rec AuditRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return AuditRecord{}, fmt.Errorf("decoding audit record %d: %w", seq, err)
	}
	rec.Seq = seq
	return rec, nil
}
