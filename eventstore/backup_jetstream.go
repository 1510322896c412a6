package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// The JetStream snapshot and restore API, spoken over a plain connection:
// nats.go's jetstream package does not offer it, and jsm.go, which does,
// writes snapshots to directories rather than to a stream of our own.
//
// Snapshot: a request to $JS.API.STREAM.SNAPSHOT.<stream> names a deliver
// subject; the answer carries the stream's config and state, then the server
// sends the snapshot in chunks there, each with a reply subject to
// acknowledge (its flow control), and ends with an empty message whose
// status header says whether it succeeded.
//
// Restore: a request to $JS.API.STREAM.RESTORE.<stream> with the config and
// state answers with a subject to send chunks to, each as a request the
// server acknowledges; an empty request ends it and is answered with the
// restored stream's info or an error.

// snapshotIdle bounds the wait for the server's next snapshot chunk.
const snapshotIdle = time.Minute

// restoreChunk bounds one restore message: under every server's default
// max payload (1 MiB).
const restoreChunk = 512 << 10

type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (%d)", e.Description, e.ErrCode) }

// snapshotStream takes a snapshot of stream and hands each chunk, in order,
// to chunk; start receives the stream's config and state as of the snapshot
// before the first chunk. A chunk is acknowledged once chunk returns, so a
// slow writer slows the server down rather than piling chunks up in memory.
func snapshotStream(ctx context.Context, nc *nats.Conn, stream string, start func(config, state json.RawMessage) error, chunk func([]byte) error) error {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(map[string]any{"deliver_subject": inbox})
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.SNAPSHOT."+stream, req)
	if err != nil {
		return fmt.Errorf("asking for a snapshot: %w", err)
	}
	var resp struct {
		Error  *apiError       `json:"error"`
		Config json.RawMessage `json:"config"`
		State  json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("decoding the snapshot answer: %w", err)
	}
	if resp.Error != nil {
		return fmt.Errorf("snapshot refused: %w", resp.Error)
	}
	if err := start(resp.Config, resp.State); err != nil {
		return err
	}
	for {
		wait, cancel := context.WithTimeout(ctx, snapshotIdle)
		m, err := sub.NextMsgWithContext(wait)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("waiting for the snapshot: %w", err)
		}
		if len(m.Data) == 0 {
			if code := m.Header.Get("Status"); code != "" && code != "204" {
				return fmt.Errorf("the server ended the snapshot with %s %s", code, m.Header.Get("Description"))
			}
			return nil
		}
		if err := chunk(m.Data); err != nil {
			return err
		}
		if m.Reply != "" {
			if err := m.Respond(nil); err != nil {
				return fmt.Errorf("acknowledging a snapshot chunk: %w", err)
			}
		}
	}
}

// streamRestore is one stream's restore in progress.
type streamRestore struct {
	nc      *nats.Conn
	name    string
	deliver string
}

// startRestore asks the server to restore a stream (which must not exist)
// with the given config and state.
func startRestore(ctx context.Context, nc *nats.Conn, name string, config, state json.RawMessage) (*streamRestore, error) {
	req, _ := json.Marshal(map[string]json.RawMessage{"config": config, "state": state})
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.RESTORE."+name, req)
	if err != nil {
		return nil, fmt.Errorf("asking for a restore: %w", err)
	}
	var resp struct {
		Error          *apiError `json:"error"`
		DeliverSubject string    `json:"deliver_subject"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("decoding the restore answer: %w", err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("restore refused: %w", resp.Error)
	}
	if resp.DeliverSubject == "" {
		return nil, errors.New("restore answer without a subject to send to")
	}
	return &streamRestore{nc: nc, name: name, deliver: resp.DeliverSubject}, nil
}

// write sends snapshot data, waiting for the server to take each chunk.
func (r *streamRestore) write(ctx context.Context, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), restoreChunk)
		msg, err := r.nc.RequestWithContext(ctx, r.deliver, p[:n])
		if err != nil {
			return fmt.Errorf("sending the snapshot: %w", err)
		}
		if len(msg.Data) > 0 {
			var resp struct {
				Error *apiError `json:"error"`
			}
			if json.Unmarshal(msg.Data, &resp) == nil && resp.Error != nil {
				return fmt.Errorf("the server refused the snapshot: %w", resp.Error)
			}
		}
		p = p[n:]
	}
	return nil
}

// finish ends the transfer and waits for the restored stream's state.
func (r *streamRestore) finish(ctx context.Context) (streamState, error) {
	msg, err := r.nc.RequestWithContext(ctx, r.deliver, nil)
	if err != nil {
		return streamState{}, fmt.Errorf("finishing the restore: %w", err)
	}
	var resp struct {
		Error *apiError    `json:"error"`
		State *streamState `json:"state"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return streamState{}, fmt.Errorf("decoding the restore's result: %w", err)
	}
	if resp.Error != nil {
		return streamState{}, fmt.Errorf("restore failed: %w", resp.Error)
	}
	if resp.State == nil {
		return streamState{}, errors.New("restore result without the stream's state")
	}
	return *resp.State, nil
}
