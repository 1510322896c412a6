package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// RestoreConfig configures Restore.
type RestoreConfig struct {
	// DataDir is the new data dir; it must be empty or absent.
	DataDir string
	// Logger receives the embedded server's notices; nil means discard.
	Logger *slog.Logger
	// StreamTimeout bounds the restore of one stream once its data is sent;
	// default 10 minutes.
	StreamTimeout time.Duration
}

// RestoreSummary says what a restore brought back.
type RestoreSummary struct {
	Manifest *BackupManifest
	Streams  []BackupStream
	// Mirrors is how many automation credentials got their mirror of the
	// event stream back.
	Mirrors int
}

// Restore reads an archive written by WriteBackup and brings it back into a
// new data dir: the trust material into <DataDir>/nats-keys, then every
// stream through JetStream's restore API on an embedded server started there
// (without a listener) and stopped at the end. Each restored stream must
// end at the last sequence the archive recorded. On any error, what Restore
// wrote is removed and the data dir is left as it was found.
func Restore(ctx context.Context, r io.Reader, cfg RestoreConfig) (sum *RestoreSummary, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("restore: a data dir is required")
	}
	if cfg.StreamTimeout == 0 {
		cfg.StreamTimeout = 10 * time.Minute
	}
	created, err := prepareRestoreDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	v := &restorer{ctx: ctx, cfg: cfg}
	defer func() {
		v.stop()
		if err != nil {
			cleanRestoreDir(cfg.DataDir, created)
		}
	}()
	m, err := readArchive(r, v)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if v.emb == nil { // an archive without streams still gets its keys checked
		if err := v.start(); err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
	}
	mirrors, err := v.emb.provisionCredentialMirrors(ctx)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	return &RestoreSummary{Manifest: m, Streams: v.streams, Mirrors: mirrors}, nil
}

// prepareRestoreDir checks that dir is empty or absent and creates it; it
// reports whether it created it.
func prepareRestoreDir(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("restore: creating %s: %w", dir, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("restore: reading %s: %w", dir, err)
	case len(entries) > 0:
		return false, fmt.Errorf("restore: the data dir %s is not empty (it holds %s, ...); restore into a new or empty directory", dir, entries[0].Name())
	}
	return false, nil
}

// cleanRestoreDir removes what a failed restore wrote into dir, which was
// empty or absent before.
func cleanRestoreDir(dir string, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// restoreAttempts is how many times a stream's restore is tried. JetStream
// gives a restore up when it sees no chunk for 5 s (a hard-coded watchdog),
// which a machine stalled on its disk or CPU reaches without anything being
// wrong with the archive: CI saw a chunk refused on a closed pipe once.
const restoreAttempts = 3

// restoreBeforeSend, set by tests, runs before each chunk of a stream's
// first attempt is sent.
var restoreBeforeSend func(stream string)

// restorer restores an archive's contents as the reader checks them.
//
// Each stream's snapshot goes to the server as it is read, and to a spool
// file beside the restored data: when the server gives the stream up, it is
// sent again from the spool (the archive is read once, from start to end).
type restorer struct {
	ctx     context.Context
	cfg     RestoreConfig
	keys    int
	emb     *Embedded
	nc      *nats.Conn
	cur     *streamRestore
	streams []BackupStream
	// spool holds the current stream's snapshot as read so far; sendErr is
	// why its first attempt stopped sending (the rest is only spooled).
	spool   *os.File
	sendErr error
}

func (v *restorer) manifest(*BackupManifest) error { return nil }

func (v *restorer) key(name string, data []byte) error {
	dir := filepath.Join(v.cfg.DataDir, KeysDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	v.keys++
	return writeFileAtomic(filepath.Join(dir, name), data)
}

// start starts the embedded server once the keys are in place.
func (v *restorer) start() error {
	emb, err := StartEmbedded(EmbeddedConfig{DataDir: v.cfg.DataDir, Logger: v.cfg.Logger, ServerName: "rezuscloud-restore"})
	if err != nil {
		return err
	}
	v.emb = emb
	if v.nc, err = emb.Connect("rezuscloud-restore"); err != nil {
		return fmt.Errorf("connecting to the embedded server: %w", err)
	}
	return nil
}

func (v *restorer) stop() {
	v.dropSpool()
	if v.nc != nil {
		v.nc.Close()
	}
	if v.emb != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v.emb.Shutdown(ctx)
	}
}

func (v *restorer) streamStart(s *BackupStream) error {
	if v.emb == nil {
		if err := v.start(); err != nil {
			return err
		}
	}
	spool, err := os.CreateTemp(v.cfg.DataDir, ".restore-spool-*")
	if err != nil {
		return fmt.Errorf("spooling the snapshot of %s: %w", s.Name, err)
	}
	v.spool, v.sendErr = spool, nil
	config, err := restoreConfig(s)
	if err != nil {
		return err
	}
	v.cur, err = startRestore(v.ctx, v.nc, s.Name, config, s.State)
	return err
}

// restoreConfig is a stream's config as restored: a single embedded server
// holds one replica of each stream, whatever the source had.
func restoreConfig(s *BackupStream) (json.RawMessage, error) {
	return withReplicas(s.Config, 1)
}

func (v *restorer) streamData(p []byte) error {
	if _, err := v.spool.Write(p); err != nil {
		return fmt.Errorf("spooling the snapshot: %w", err)
	}
	if v.sendErr != nil {
		return nil
	}
	if restoreBeforeSend != nil {
		restoreBeforeSend(v.cur.name)
	}
	if err := v.cur.write(v.ctx, p); err != nil {
		if v.ctx.Err() != nil {
			return err
		}
		v.sendErr = err
	}
	return nil
}

func (v *restorer) streamEnd(s *BackupStream) error {
	defer v.dropSpool()
	got, err := v.finishStream(s, v.sendErr)
	for attempt := 2; err != nil && attempt <= restoreAttempts && v.ctx.Err() == nil; attempt++ {
		if v.cfg.Logger != nil {
			v.cfg.Logger.Warn("restore: the server gave the stream up; sending it again", "stream", s.Name, "attempt", attempt, "err", err)
		}
		got, err = v.resend(s)
	}
	if err != nil {
		return err
	}
	if got.LastSeq != s.LastSeq {
		return fmt.Errorf("restored up to sequence %d, the archive recorded %d", got.LastSeq, s.LastSeq)
	}
	v.streams = append(v.streams, *s)
	return nil
}

// finishStream ends the transfer of the current attempt, unless sending it
// failed (sendErr).
func (v *restorer) finishStream(s *BackupStream, sendErr error) (streamState, error) {
	cur := v.cur
	v.cur = nil
	if sendErr != nil {
		return streamState{}, sendErr
	}
	ctx, cancel := context.WithTimeout(v.ctx, v.cfg.StreamTimeout)
	defer cancel()
	return cur.finish(ctx)
}

// resend restores s again from the spool, after removing what a failed
// attempt may have left of it.
func (v *restorer) resend(s *BackupStream) (streamState, error) {
	if _, err := v.nc.RequestWithContext(v.ctx, "$JS.API.STREAM.DELETE."+s.Name, nil); err != nil {
		return streamState{}, fmt.Errorf("removing the stream's failed restore: %w", err)
	}
	config, err := restoreConfig(s)
	if err != nil {
		return streamState{}, err
	}
	if v.cur, err = startRestore(v.ctx, v.nc, s.Name, config, s.State); err != nil {
		return streamState{}, err
	}
	if _, err := v.spool.Seek(0, io.SeekStart); err != nil {
		return streamState{}, fmt.Errorf("reading the spooled snapshot: %w", err)
	}
	buf := make([]byte, 1<<20)
	var sendErr error
	for sendErr == nil {
		n, err := v.spool.Read(buf)
		if n > 0 {
			sendErr = v.cur.write(v.ctx, buf[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return streamState{}, fmt.Errorf("reading the spooled snapshot: %w", err)
		}
	}
	return v.finishStream(s, sendErr)
}

// dropSpool removes the current stream's spool file.
func (v *restorer) dropSpool() {
	if v.spool != nil {
		_ = v.spool.Close()
		_ = os.Remove(v.spool.Name())
		v.spool = nil
	}
}

// withReplicas sets a stream config's replicas, keeping every other field
// as the server wrote it.
func withReplicas(config json.RawMessage, n int) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(config, &m); err != nil {
		return nil, fmt.Errorf("decoding the stream's config: %w", err)
	}
	m["num_replicas"] = json.RawMessage(fmt.Sprint(n))
	return json.Marshal(m)
}

// provisionCredentialMirrors gives every automation credential account that
// is not revoked its mirror of the event stream again: the mirrors live in
// those accounts, outside the application account a backup copies, and a
// new mirror copies the restored stream with its sequences.
func (e *Embedded) provisionCredentialMirrors(ctx context.Context) (int, error) {
	e.trust.mu.Lock()
	var live []string
	for pub, ac := range e.trust.credentialAccounts {
		if _, revoked := ac.Revocations[jwt.All]; !revoked {
			live = append(live, pub)
		}
	}
	e.trust.mu.Unlock()
	for _, pub := range live {
		nc, err := e.connectCredentialAccount(pub)
		if err != nil {
			return 0, fmt.Errorf("connecting to automation account %s: %w", pub, err)
		}
		err = provisionEventMirror(ctx, nc)
		nc.Close()
		if err != nil {
			return 0, err
		}
	}
	return len(live), nil
}
