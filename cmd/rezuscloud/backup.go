package main

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name: "backup",
		Usage: "write an archive of RezusCloud's own data (every stream, KV bucket and object store): " +
			"online from a running server (--server, admin token) or offline from a stopped server's data dir (--data-dir)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "to", Required: true, Usage: "the archive to write (a name ending in .gz is gzip-compressed); written 0600, replaced only once complete and verified"},
			&cli.StringFlag{Name: "server", EnvVars: []string{"REZUSCLOUD_SERVER"}, Usage: "online: the running server's URL; the archive comes from GET /api/v1/admin/backup"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"REZUSCLOUD_TOKEN"}, Usage: "online: an admin's bearer token (an API token, a session, or the --admin-token)"},
			&cli.StringFlag{Name: "certificate-authority", Usage: "online: PEM file of the CA that signed the server's certificate"},
			&cli.StringFlag{Name: "data-dir", Usage: "offline: the data dir of a stopped server (refused while a server runs on it)"},
			&cli.StringFlag{Name: "nats-url", Usage: "an external NATS cluster (the one --nats-url of serve names), with --nats-creds; no trust material is carried"},
			&cli.StringFlag{Name: "nats-creds", Usage: "credentials file for --nats-url"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			sources := 0
			for _, f := range []string{"server", "data-dir", "nats-url"} {
				if c.String(f) != "" {
					sources++
				}
			}
			if sources != 1 {
				return errors.New("backup: give exactly one of --server (online), --data-dir (offline) or --nats-url")
			}
			start := time.Now()
			write := func(w io.Writer) error {
				switch {
				case c.String("server") != "":
					return fetchBackup(ctx, c.String("server"), c.String("token"), c.String("certificate-authority"), w)
				case c.String("data-dir") != "":
					return offlineBackup(ctx, c.String("data-dir"), w)
				default:
					return natsBackup(ctx, c.String("nats-url"), c.String("nats-creds"), w)
				}
			}
			m, size, err := writeArchiveFile(c.String("to"), write)
			if err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			fmt.Printf("wrote %s: %d streams, %d bytes, in %s (%s backup of rezuscloud %s)\n",
				c.String("to"), len(m.Streams), size, time.Since(start).Round(time.Millisecond), m.Source.Mode, m.Source.Version)
			return nil
		},
	}
}

// backupFirst is the order the read model's consistency needs: the
// projector's checkpoint, then its buckets, before the event stream (see
// docs/operations.md).
func backupFirst() []string {
	first := []string{"KV_" + projections.CheckpointBucket}
	for _, k := range domain.Kinds() {
		first = append(first, "KV_"+projections.BucketName(k))
	}
	return first
}

// backupConfig is the backup of this server's data; keysDir is empty with
// an external NATS.
func backupConfig(mode, keysDir string) eventstore.BackupConfig {
	return eventstore.BackupConfig{First: backupFirst(), KeysDir: keysDir, Version: build().Version, Mode: mode}
}

// writeArchiveFile writes an archive through write into a temp file beside
// path, reads it back to verify it, and only then renames it into place.
func writeArchiveFile(path string, write func(io.Writer) error) (*eventstore.BackupManifest, int64, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return nil, 0, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, 0, err
	}
	var w io.Writer = f
	var zw *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		zw = gzip.NewWriter(f)
		w = zw
	}
	err = write(w)
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, err
	}
	r, err := os.Open(tmp)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	m, err := eventstore.VerifyBackup(r)
	if err != nil {
		return nil, 0, fmt.Errorf("the archive written does not read back: %w", err)
	}
	st, err := r.Stat()
	if err != nil {
		return nil, 0, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, 0, err
	}
	return m, st.Size(), nil
}

// fetchBackup streams the archive from a running server's admin API.
func fetchBackup(ctx context.Context, server, token, caFile string, w io.Writer) error {
	if token == "" {
		return errors.New("--server needs an admin's --token (or REZUSCLOUD_TOKEN)")
	}
	client := &http.Client{}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s holds no PEM certificate", caFile)
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(server, "/")+"/api/v1/admin/backup", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("the server answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// offlineBackup starts the embedded server on a stopped server's data dir,
// without a listener, backs it up and stops it.
func offlineBackup(ctx context.Context, dataDir string, w io.Writer) error {
	if _, err := os.Stat(filepath.Join(dataDir, eventstore.KeysDir)); err != nil {
		return fmt.Errorf("%s is not a rezuscloud data dir: %w", dataDir, err)
	}
	emb, err := eventstore.StartEmbedded(eventstore.EmbeddedConfig{DataDir: dataDir, ServerName: "rezuscloud-backup"})
	if errors.Is(err, eventstore.ErrDataDirInUse) {
		return fmt.Errorf("%w: back it up online with --server instead", err)
	}
	if err != nil {
		return err
	}
	defer func() {
		shCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		emb.Shutdown(shCtx)
	}()
	nc, err := emb.Connect("rezuscloud-backup")
	if err != nil {
		return err
	}
	defer nc.Close()
	_, err = eventstore.WriteBackup(ctx, nc, w, backupConfig("offline", filepath.Join(dataDir, eventstore.KeysDir)))
	return err
}

// natsBackup backs up the account of an external NATS connection.
func natsBackup(ctx context.Context, url, creds string, w io.Writer) error {
	opts := []nats.Option{nats.Name("rezuscloud-backup")}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", url, err)
	}
	defer nc.Close()
	_, err = eventstore.WriteBackup(ctx, nc, w, backupConfig("online", ""))
	return err
}

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name: "restore",
		Usage: "bring a backup archive back into a new data dir (empty or absent); then run serve on it " +
			"with the same sealing key (--secrets-key-file or REZUSCLOUD_SECRETS_PASSPHRASE: the archive does not carry it)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Required: true, Usage: "the archive written by rezuscloud backup (plain or .gz)"},
			&cli.StringFlag{Name: "data-dir", Required: true, Usage: "the new data dir; must be empty or absent"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			f, err := os.Open(c.String("from"))
			if err != nil {
				return fmt.Errorf("restore: %w", err)
			}
			defer f.Close()
			start := time.Now()
			sum, err := eventstore.Restore(ctx, f, eventstore.RestoreConfig{DataDir: c.String("data-dir")})
			if err != nil {
				return err
			}
			var events uint64
			for _, s := range sum.Streams {
				if s.Name == eventstore.StreamName {
					events = s.LastSeq
				}
			}
			fmt.Printf("restored %d streams (events up to sequence %d) from the %s backup of %s into %s in %s\n",
				len(sum.Streams), events, sum.Manifest.Source.Mode, sum.Manifest.CreatedAt.Format(time.RFC3339), c.String("data-dir"),
				time.Since(start).Round(time.Millisecond))
			if len(sum.Manifest.Keys) == 0 {
				fmt.Println("the archive carried no NATS trust material (an external NATS): the data dir has new keys, and automation credentials must be issued again")
			}
			fmt.Println("secrets are still sealed: start the server with the sealing key of the source (--secrets-key-file, or REZUSCLOUD_SECRETS_PASSPHRASE)")
			return nil
		},
	}
}
