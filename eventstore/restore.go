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

// restorer restores an archive's contents as the reader checks them.
type restorer struct {
	ctx     context.Context
	cfg     RestoreConfig
	keys    int
	emb     *Embedded
	nc      *nats.Conn
	cur     *streamRestore
	streams []BackupStream
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
	// A single embedded server holds one replica of each stream, whatever
	// the source had.
	config, err := withReplicas(s.Config, 1)
	if err != nil {
		return err
	}
	v.cur, err = startRestore(v.ctx, v.nc, s.Name, config, s.State)
	return err
}

func (v *restorer) streamData(p []byte) error {
	return v.cur.write(v.ctx, p)
}

func (v *restorer) streamEnd(s *BackupStream) error {
	ctx, cancel := context.WithTimeout(v.ctx, v.cfg.StreamTimeout)
	defer cancel()
	got, err := v.cur.finish(ctx)
	v.cur = nil
	if err != nil {
		return err
	}
	if got.LastSeq != s.LastSeq {
		return fmt.Errorf("restored up to sequence %d, the archive recorded %d", got.LastSeq, s.LastSeq)
	}
	v.streams = append(v.streams, *s)
	return nil
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
