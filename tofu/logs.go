package tofu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Apply logs live in two places: while a run is going, its output is published
// in chunks to the stream LogStream (subject rezus.applylog.<tenant>.<apply>),
// so any replica can follow it live; when the run ends the whole log is stored
// in the object store LogBucket under "<tenant>/<apply>" and an end marker is
// published. Followers read the object when it is there, else the chunks until
// the end marker.
const (
	LogStream     = "REZUS_APPLY_LOGS"
	LogBucket     = "rezus-apply-logs"
	logSubject    = "rezus.applylog"
	logEndHeader  = "Rezus-Log-End"
	maxChunkBytes = 32 << 10
	// MaxLogBytes bounds one apply's kept log; output beyond it is dropped
	// with a note (a tofu run writes KiBs to a few MiB).
	MaxLogBytes = 64 << 20
	flushEvery  = 250 * time.Millisecond
)

// Logs stores and serves apply logs.
type Logs struct {
	js  jetstream.JetStream
	obj jetstream.ObjectStore
}

// OpenLogs provisions the log stream and object store.
func OpenLogs(ctx context.Context, s *eventstore.Store) (*Logs, error) {
	js := s.JetStream()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: LogStream, Description: "live apply output", Subjects: []string{logSubject + ".>"},
		Storage: jetstream.FileStorage, Replicas: s.Replicas(), MaxAge: 24 * time.Hour,
		MaxBytes: 1 << 30, Discard: jetstream.DiscardOld,
	}); err != nil {
		return nil, fmt.Errorf("provisioning stream %s: %w", LogStream, err)
	}
	obj, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: LogBucket, Description: "apply logs", Storage: jetstream.FileStorage, Replicas: s.Replicas(),
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		obj, err = js.ObjectStore(ctx, LogBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("provisioning object store %s: %w", LogBucket, err)
	}
	return &Logs{js: js, obj: obj}, nil
}

func logName(tenant, apply string) string      { return tenant + "/" + apply }
func logSubjectOf(tenant, apply string) string { return logSubject + "." + tenant + "." + apply }

// Writer returns a writer for a run's log. Close it to store the log.
func (l *Logs) Writer(ctx context.Context, tenant, apply string) *LogWriter {
	w := &LogWriter{logs: l, ctx: context.WithoutCancel(ctx), tenant: tenant, apply: apply, stop: make(chan struct{}), stopped: make(chan struct{})}
	go w.flusher()
	return w
}

// MemoryLog is a LogWriter that only keeps what is written (Bytes): the
// output of a drift check, which is no apply and has no stored log.
func MemoryLog() *LogWriter {
	w := &LogWriter{stop: make(chan struct{}), stopped: make(chan struct{})}
	close(w.stopped)
	return w
}

// LogWriter collects a run's output, publishing it in chunks as it comes.
type LogWriter struct {
	logs          *Logs
	ctx           context.Context
	tenant, apply string

	mu        sync.Mutex
	all       bytes.Buffer
	pending   bytes.Buffer
	truncated bool
	closed    bool
	err       error

	stop    chan struct{}
	stopped chan struct{}
}

// Write keeps p and publishes it with the next chunk. It never fails: a log
// that cannot be published must not fail the run.
func (w *LogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return len(p), nil
	}
	room := MaxLogBytes - w.all.Len()
	q := p
	if len(q) > room {
		q = q[:max(room, 0)]
		if !w.truncated {
			w.truncated = true
			defer w.note("\n[log truncated: more than %d bytes]\n", MaxLogBytes)
		}
	}
	w.all.Write(q)
	w.pending.Write(q)
	if w.pending.Len() >= maxChunkBytes {
		w.flushLocked()
	}
	return len(p), nil
}

// Printf writes a line of RezusCloud's own (as opposed to tofu's) output.
func (w *LogWriter) Printf(format string, args ...any) {
	_, _ = fmt.Fprintf(w, "[rezuscloud] "+format+"\n", args...)
}

func (w *LogWriter) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	w.all.WriteString(s)
	w.pending.WriteString(s)
}

func (w *LogWriter) flusher() {
	defer close(w.stopped)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			w.flushLocked()
			w.mu.Unlock()
		}
	}
}

func (w *LogWriter) flushLocked() {
	if w.logs == nil {
		w.pending.Reset()
		return
	}
	for w.pending.Len() > 0 {
		chunk := w.pending.Next(maxChunkBytes)
		if _, err := w.logs.js.Publish(w.ctx, logSubjectOf(w.tenant, w.apply), chunk); err != nil && w.err == nil {
			w.err = err
		}
	}
	w.pending.Reset()
}

// Bytes returns what has been written so far.
func (w *LogWriter) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.all.Bytes())
}

// Close publishes what is pending, stores the whole log and marks its end.
func (w *LogWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return w.err
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	<-w.stopped
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
	if w.logs == nil {
		return nil
	}
	if _, err := w.logs.obj.PutBytes(w.ctx, logName(w.tenant, w.apply), w.all.Bytes()); err != nil && w.err == nil {
		w.err = fmt.Errorf("storing the log: %w", err)
	}
	if err := w.logs.end(w.ctx, w.tenant, w.apply); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

func (l *Logs) end(ctx context.Context, tenant, apply string) error {
	m := &nats.Msg{Subject: logSubjectOf(tenant, apply), Header: nats.Header{}}
	m.Header.Set(logEndHeader, "true")
	_, err := l.js.PublishMsg(ctx, m)
	return err
}

// MarkEnded ends the live log of a run whose process died without closing it,
// storing what was published.
func (l *Logs) MarkEnded(ctx context.Context, tenant, apply, note string) error {
	var buf bytes.Buffer
	_ = l.Follow(ctx, tenant, apply, false, func(b []byte) error { buf.Write(b); return nil })
	buf.WriteString(note)
	if _, err := l.obj.PutBytes(ctx, logName(tenant, apply), buf.Bytes()); err != nil {
		return err
	}
	return l.end(ctx, tenant, apply)
}

// ErrLogNotFound says a run has no log.
var ErrLogNotFound = errors.New("no log for this apply")

// Follow sends a run's log to send: the stored log when the run has ended,
// else the chunks published so far and, with follow, the rest as it comes
// until the run ends or ctx does.
func (l *Logs) Follow(ctx context.Context, tenant, apply string, follow bool, send func([]byte) error) error {
	if b, err := l.obj.GetBytes(ctx, logName(tenant, apply)); err == nil {
		return send(b)
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	cons, err := l.js.OrderedConsumer(ctx, LogStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{logSubjectOf(tenant, apply)},
	})
	if err != nil {
		return err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	if info.NumPending == 0 && !follow {
		return ErrLogNotFound
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if msg.Headers().Get(logEndHeader) != "" {
			return nil
		}
		if err := send(msg.Data()); err != nil {
			return err
		}
		if md, err := msg.Metadata(); err == nil && !follow && md.NumPending == 0 {
			return nil
		}
	}
}

// Delete removes a run's stored log.
func (l *Logs) Delete(ctx context.Context, tenant, apply string) error {
	err := l.obj.Delete(ctx, logName(tenant, apply))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	return err
}
