package eventstore

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BackupConfig configures WriteBackup.
type BackupConfig struct {
	// First names the streams copied before the event stream, in this order;
	// those that do not exist are skipped. The read model's consistency rests
	// on it: the projections' checkpoint, then their buckets, then the events
	// (see docs/operations.md). Every other stream follows the event stream.
	First []string
	// KeysDir, when set, is the embedded server's keys dir (<data-dir>/nats-keys):
	// its operator and account seeds and account JWTs go into the archive, so
	// the restored server has the same identity (automation credentials
	// stay valid). Empty (an external NATS) carries none.
	KeysDir string
	// Version is RezusCloud's version, recorded in the manifest.
	Version string
	// Mode is "online" or "offline", recorded in the manifest.
	Mode string
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// BackupSummary says what a backup wrote.
type BackupSummary struct {
	Manifest *BackupManifest
	Streams  []BackupStream
}

// WriteBackup writes an archive of every stream of the connection's account
// (the event stream, the audit stream, every KV bucket and object store) to
// w, one JetStream snapshot after the other, streaming: it holds at most one
// part (backupPartSize) of one stream in memory. It works against a running
// server; each stream is copied as of the moment its snapshot starts.
func WriteBackup(ctx context.Context, nc *nats.Conn, w io.Writer, cfg BackupConfig) (*BackupSummary, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	names, err := backupOrder(ctx, js, cfg.First)
	if err != nil {
		return nil, err
	}
	keys, err := readKeyFiles(cfg.KeysDir)
	if err != nil {
		return nil, err
	}
	now := cfg.Now().UTC()
	m := &BackupManifest{Format: BackupFormat, Version: BackupVersion, CreatedAt: now, Streams: names,
		Source: BackupSource{Version: cfg.Version, NATSServer: nc.ConnectedServerVersion(), Mode: cfg.Mode}}
	for _, k := range keys {
		m.Keys = append(m.Keys, k.name)
	}
	tw := tar.NewWriter(w)
	a := &archiveWriter{tw: tw, now: now}
	if err := a.json(backupManifestName, m); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := a.file("keys/"+k.name, k.data); err != nil {
			return nil, err
		}
	}
	sum := &BackupSummary{Manifest: m}
	for _, name := range names {
		s, err := backupStream(ctx, nc, a, name)
		if err != nil {
			return nil, fmt.Errorf("backing up stream %s: %w", name, err)
		}
		sum.Streams = append(sum.Streams, *s)
	}
	if err := a.json(backupEndName, backupEnd{Streams: len(names)}); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return sum, nil
}

// backupOrder lists the account's streams: First (those that exist), the
// event stream, then the others by name.
func backupOrder(ctx context.Context, js jetstream.JetStream, first []string) ([]string, error) {
	lister := js.StreamNames(ctx)
	var all []string
	for n := range lister.Name() {
		all = append(all, n)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("listing streams: %w", err)
	}
	sort.Strings(all)
	var out []string
	for _, n := range append(slices.Clone(first), StreamName) {
		if slices.Contains(all, n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, n := range all {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, n := range out {
		if !streamNameRE.MatchString(n) {
			return nil, fmt.Errorf("stream name %q cannot go into an archive", n)
		}
	}
	return out, nil
}

func backupStream(ctx context.Context, nc *nats.Conn, a *archiveWriter, name string) (*BackupStream, error) {
	parts := &streamParts{a: a, name: name, sum: sha256.New()}
	s := &BackupStream{Name: name}
	err := snapshotStream(ctx, nc, name, func(config, state json.RawMessage) error {
		var st streamState
		if err := json.Unmarshal(state, &st); err != nil {
			return fmt.Errorf("decoding the stream's state: %w", err)
		}
		s.Config, s.State, s.Messages, s.FirstSeq, s.LastSeq = config, state, st.Msgs, st.FirstSeq, st.LastSeq
		return a.json("streams/"+name+"/stream.json", s)
	}, parts.write)
	if err != nil {
		return nil, err
	}
	return s, parts.end()
}

type keyFile struct {
	name string
	data []byte
}

// readKeyFiles reads the seeds (*.nk) and account JWTs (*.jwt) of the keys
// dir; the server's own .creds file is minted anew at every start and stays out.
func readKeyFiles(dir string) ([]keyFile, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the keys dir: %w", err)
	}
	var out []keyFile
	for _, e := range entries {
		if !e.Type().IsRegular() || !keyFileRE.MatchString(e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // replaced while we listed
		}
		if err != nil {
			return nil, fmt.Errorf("reading the keys dir: %w", err)
		}
		out = append(out, keyFile{name: e.Name(), data: data})
	}
	return out, nil
}
