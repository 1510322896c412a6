package eventstore_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// backupCtx bounds a backup or restore test: they copy several MiB through
// the server, which takes a while on a loaded machine with -race.
func backupCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// backupOf fills a server with events, a KV bucket and an object store and
// returns an archive of it, taken while it runs, and the server.
func backupOf(t *testing.T) ([]byte, *eventstoretest.Env) {
	t.Helper()
	ctx := backupCtx(t)
	env := eventstoretest.Start(t)
	env.Populate(t, domain.TenantKind, "", "t", 40, `{}`)
	js := env.Store.JetStream()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "rezus-backup-test", History: 3})
	require.NoError(t, err)
	for i := range 5 {
		_, err := kv.Put(ctx, "k", fmt.Appendf(nil, "v%d", i))
		require.NoError(t, err)
	}
	obj, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "rezus-backup-objects"})
	require.NoError(t, err)
	big := make([]byte, 9<<20) // incompressible: several parts
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	_, err = obj.PutBytes(ctx, "blob", big)
	require.NoError(t, err)

	var buf bytes.Buffer
	sum, err := eventstore.WriteBackup(ctx, env.Conn, &buf, eventstore.BackupConfig{
		First: []string{"KV_rezus-backup-test"}, KeysDir: filepath.Join(env.Dir, eventstore.KeysDir), Version: "test", Mode: "online",
	})
	require.NoError(t, err)
	require.Equal(t, []string{"KV_rezus-backup-test", eventstore.StreamName, "OBJ_rezus-backup-objects", eventstore.DeadLetterStream}, sum.Manifest.Streams)
	require.Contains(t, sum.Manifest.Keys, "rezus.nk")
	require.NotContains(t, sum.Manifest.Keys, "rezuscloud.creds")
	return buf.Bytes(), env
}

func TestBackupRestoreRoundTrip(t *testing.T) {
	archive, src := backupOf(t)
	ctx := backupCtx(t)
	_, srcLast, err := src.Store.Bounds(ctx)
	require.NoError(t, err)

	for _, compressed := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", compressed), func(t *testing.T) {
			in := archive
			if compressed {
				var gz bytes.Buffer
				zw := gzip.NewWriter(&gz)
				_, err := zw.Write(archive)
				require.NoError(t, err)
				require.NoError(t, zw.Close())
				in = gz.Bytes()
			}
			ctx := backupCtx(t)
			dir := filepath.Join(t.TempDir(), "restored")
			sum, err := eventstore.Restore(ctx, bytes.NewReader(in), eventstore.RestoreConfig{DataDir: dir})
			require.NoError(t, err)
			require.Len(t, sum.Streams, 4, "the three and the dead-letter stream")

			// The same identity: the application account's seed came along.
			want, err := os.ReadFile(filepath.Join(src.Dir, eventstore.KeysDir, "rezus.nk"))
			require.NoError(t, err)
			got, err := os.ReadFile(filepath.Join(dir, eventstore.KeysDir, "rezus.nk"))
			require.NoError(t, err)
			require.Equal(t, want, got)

			env := eventstoretest.Start(t, dir)
			_, last, err := env.Store.Bounds(ctx)
			require.NoError(t, err)
			require.Equal(t, srcLast, last)
			obj, err := env.Store.Load(ctx, tenantRef("t-0000007"))
			require.NoError(t, err)
			orig, err := src.Store.Load(ctx, tenantRef("t-0000007"))
			require.NoError(t, err)
			require.Equal(t, orig.Seq, obj.Seq)
			require.Equal(t, orig.State(), obj.State())

			js := env.Store.JetStream()
			kv, err := js.KeyValue(ctx, "rezus-backup-test")
			require.NoError(t, err)
			e, err := kv.Get(ctx, "k")
			require.NoError(t, err)
			require.Equal(t, "v4", string(e.Value()))
			require.Equal(t, uint64(5), e.Revision())
			objs, err := js.ObjectStore(ctx, "rezus-backup-objects")
			require.NoError(t, err)
			blob, err := objs.GetBytes(ctx, "blob")
			require.NoError(t, err)
			require.Len(t, blob, 9<<20)
		})
	}
}

// JetStream gives a restore up when no chunk comes for 5 s; the stream is
// then sent again from the spooled snapshot, and the restore still brings
// back every message. Here the first chunk of the event stream waits past
// the server's watchdog, as on a machine stalled on its disk.
func TestRestoreSendsAStreamAgainWhenTheServerGivesItUp(t *testing.T) {
	archive, src := backupOf(t)
	ctx := backupCtx(t)
	_, srcLast, err := src.Store.Bounds(ctx)
	require.NoError(t, err)
	stalled := false
	eventstore.SetRestoreBeforeSend(t, func(stream string) {
		if stream == eventstore.StreamName && !stalled {
			stalled = true
			time.Sleep(6 * time.Second)
		}
	})
	var logs bytes.Buffer
	dir := filepath.Join(t.TempDir(), "restored")
	sum, err := eventstore.Restore(ctx, bytes.NewReader(archive), eventstore.RestoreConfig{
		DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	require.True(t, stalled)
	require.Contains(t, logs.String(), "sending it again", "the first attempt failed")
	require.Len(t, sum.Streams, 4, "the three and the dead-letter stream")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), ".restore-spool"), "spool %s left behind", e.Name())
	}

	env := eventstoretest.Start(t, dir)
	_, last, err := env.Store.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, srcLast, last)
	obj, err := env.Store.Load(ctx, tenantRef("t-0000039"))
	require.NoError(t, err)
	orig, err := src.Store.Load(ctx, tenantRef("t-0000039"))
	require.NoError(t, err)
	require.Equal(t, orig.State(), obj.State())
}

func TestRestoreRefusesANonEmptyDataDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o600))
	_, err := eventstore.Restore(backupCtx(t), strings.NewReader("whatever"), eventstore.RestoreConfig{DataDir: dir})
	require.ErrorContains(t, err, "is not empty")
	data, err := os.ReadFile(filepath.Join(dir, "keep"))
	require.NoError(t, err)
	require.Equal(t, "x", string(data))
}

// tarOf builds a tar of the given entries, in order.
func tarOf(t *testing.T, entries ...[2]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: e[0], Mode: 0o600, Size: int64(len(e[1])), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(e[1]))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func TestRestoreRefusesBadArchives(t *testing.T) {
	archive, _ := backupOf(t)
	// A byte flipped inside the last stream's snapshot: its checksum fails.
	corrupt := bytes.Clone(archive)
	i := bytes.Index(corrupt, []byte("streams/OBJ_rezus-backup-objects/part-000002"))
	require.Positive(t, i)
	corrupt[i+512+1000] ^= 0xff

	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"empty", "not a rezuscloud backup", nil},
		{"foreign", "not a rezuscloud backup", []byte("PK\x03\x04 this is a zip file, or something else entirely")},
		{"tar without manifest", "not a rezuscloud backup", tarOf(t, [2]string{"etc/passwd", "root:x:0:0"})},
		{"foreign manifest", "not a rezuscloud backup", tarOf(t, [2]string{"manifest.json", `{"format":"other","version":1}`})},
		{"newer version", "has version 2; this rezuscloud reads version 1", tarOf(t, [2]string{"manifest.json", `{"format":"rezuscloud-backup","version":2}`})},
		{"manifest only", "truncated", tarOf(t, [2]string{"manifest.json", `{"format":"rezuscloud-backup","version":1,"streams":["A"]}`})},
		{"bad stream name", "bad or repeated stream name", tarOf(t, [2]string{"manifest.json", `{"format":"rezuscloud-backup","version":1,"streams":["../x"]}`})},
		{"bad key name", "bad key file name", tarOf(t, [2]string{"manifest.json", `{"format":"rezuscloud-backup","version":1,"keys":["../../etc/x.nk"]}`})},
		{"cut in half", "truncated", archive[:len(archive)/2]},
		{"cut before its end", "truncated", archive[:bytes.LastIndex(archive, []byte("end.json"))-100]},
		{"without its end", "truncated", archive[:bytes.LastIndex(archive, []byte("end.json"))]},
		{"corrupt", "does not match its checksum", corrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := eventstore.VerifyBackup(bytes.NewReader(tc.data))
			require.ErrorContains(t, err, tc.want)

			parent := t.TempDir()
			dir := filepath.Join(parent, "new")
			_, err = eventstore.Restore(backupCtx(t), bytes.NewReader(tc.data), eventstore.RestoreConfig{DataDir: dir})
			require.ErrorContains(t, err, tc.want)
			_, statErr := os.Stat(dir)
			require.True(t, os.IsNotExist(statErr), "a failed restore leaves no data dir behind")
		})
	}
}

func TestVerifyBackupReadsAGoodArchive(t *testing.T) {
	archive, _ := backupOf(t)
	m, err := eventstore.VerifyBackup(bytes.NewReader(archive))
	require.NoError(t, err)
	require.Equal(t, eventstore.BackupFormat, m.Format)
	require.Equal(t, "online", m.Source.Mode)
	require.NotEmpty(t, m.Source.NATSServer)
}
