package eventstore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetterStream keeps a copy of every record a consumer could not decode
// (a poison record): the original stream, sequence, subject and the error in
// headers, the record's bytes as the data. One forged message in
// REZUS_EVENTS stopped every replica, at every restart (issue 27): a record
// that cannot be decoded is now logged, counted, kept here and skipped by
// every consumer, and the server keeps serving.
const DeadLetterStream = "REZUS_DEAD_LETTERS"

// deadLetterSubject is the dead-letter stream's subject; the original
// stream's name follows it.
const deadLetterSubject = "rezus.dead"

// Headers of a dead letter.
const (
	HeaderDeadStream  = "Rezus-Dead-Stream"
	HeaderDeadSeq     = "Rezus-Dead-Sequence"
	HeaderDeadSubject = "Rezus-Dead-Subject"
	HeaderDeadError   = "Rezus-Dead-Error"
)

// deadLetters records poison records of one store.
type deadLetters struct {
	js    jetstream.JetStream
	log   *slog.Logger
	count atomic.Uint64
}

// provisionDeadLetters creates the dead-letter stream: bounded (the newest
// 10,000 letters, 64 MiB), deduplicated by original stream and sequence so
// that every consumer and replica meeting one poison record keeps it once.
func provisionDeadLetters(ctx context.Context, js jetstream.JetStream, replicas int) error {
	return retryUnavailable(ctx, func() error {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        DeadLetterStream,
			Description: "records of other streams that could not be decoded, kept for inspection",
			Subjects:    []string{deadLetterSubject + ".>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			MaxMsgs:     10000,
			MaxBytes:    64 << 20,
			Replicas:    replicas,
			Duplicates:  time.Hour,
		})
		return err
	})
}

// record logs, counts and keeps a record of stream that could not be
// decoded; the caller skips it. Keeping it is best effort: the record is
// still in its own stream, and the log names it.
func (d *deadLetters) record(stream string, seq uint64, subject string, data []byte, cause error) {
	d.count.Add(1)
	d.log.Error("skipping a record that cannot be decoded (kept in "+DeadLetterStream+")",
		"stream", stream, "seq", seq, "subject", subject, "err", cause)
	msg := &nats.Msg{Subject: deadLetterSubject + "." + stream, Data: data, Header: nats.Header{}}
	msg.Header.Set(HeaderDeadStream, stream)
	msg.Header.Set(HeaderDeadSeq, strconv.FormatUint(seq, 10))
	msg.Header.Set(HeaderDeadSubject, subject)
	msg.Header.Set(HeaderDeadError, truncate(cause.Error(), 1024))
	msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-%d", stream, seq))
	if _, err := d.js.PublishMsgAsync(msg); err != nil {
		d.log.Warn("keeping a dead letter", "stream", stream, "seq", seq, "err", err)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// PoisonRecords is how many undecodable records this process skipped.
func (s *Store) PoisonRecords() uint64 { return s.dead.count.Load() }

// Poisoned records a record of stream that a consumer outside this package
// could not decode, so it is logged, counted and kept like the store's own.
func (s *Store) Poisoned(stream string, seq uint64, subject string, data []byte, cause error) {
	s.dead.record(stream, seq, subject, data, cause)
}
