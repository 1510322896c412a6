package eventstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func openBackups(t *testing.T, ctx context.Context, env *eventstoretest.Env) *eventstore.EtcdBackups {
	t.Helper()
	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	b, err := eventstore.OpenEtcdBackups(ctx, env.Store, sealed)
	require.NoError(t, err)
	return b
}

// TestEtcdBackupsSealedRoundTrip: a snapshot put into the bucket is stored
// sealed (the raw object does not show it), opens as it was, and a stored
// object altered in the bucket fails to open with ErrSealedStreamDamaged;
// a failed put leaves no object.
func TestEtcdBackupsSealedRoundTrip(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	b := openBackups(t, ctx, env)
	plain := append([]byte("an etcd snapshot, opaque to the store: {\"secret\":\"hunter2\"}\n"), make([]byte, 300<<10)...)
	_, _ = rand.Read(plain[60:])
	obj := eventstore.EtcdBackupObject("acme", "b1", "uid-1")
	size, err := b.Put(ctx, obj, bytes.NewReader(plain))
	require.NoError(t, err)
	require.Equal(t, uint64(int64(len(plain))+eventstore.SealedStreamOverhead(int64(len(plain)))), size)

	rc, err := b.Open(ctx, obj)
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.True(t, bytes.Equal(plain, got))

	raw, err := env.Store.JetStream().ObjectStore(ctx, eventstore.EtcdBackupBucket)
	require.NoError(t, err)
	sealed, err := raw.GetBytes(ctx, obj)
	require.NoError(t, err)
	require.NotContains(t, string(sealed), "hunter2", "stored sealed")

	sealed[len(sealed)/2] ^= 1
	_, err = raw.PutBytes(ctx, obj, sealed)
	require.NoError(t, err)
	rc, err = b.Open(ctx, obj)
	require.NoError(t, err)
	_, err = io.ReadAll(rc)
	require.ErrorIs(t, err, eventstore.ErrSealedStreamDamaged)
	rc.Close()

	boom := errors.New("snapshot cut short")
	failed := eventstore.EtcdBackupObject("acme", "b2", "uid-2")
	_, err = b.Put(ctx, failed, io.MultiReader(bytes.NewReader(plain), &failingReader{err: boom}))
	require.ErrorIs(t, err, boom)
	_, err = b.Open(ctx, failed)
	require.ErrorIs(t, err, eventstore.ErrBackupObjectNotFound)

	require.NoError(t, b.Delete(ctx, obj))
	require.NoError(t, b.Delete(ctx, obj), "deleting twice is fine")
	_, err = b.Open(ctx, obj)
	require.ErrorIs(t, err, eventstore.ErrBackupObjectNotFound)
}

type failingReader struct{ err error }

func (f *failingReader) Read([]byte) (int, error) { return 0, f.err }

// TestEtcdBackupsSweepPartial: chunks left by a put that never finished
// (a process killed mid-way) are purged once quiet; whole objects stay.
func TestEtcdBackupsSweepPartial(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	b := openBackups(t, ctx, env)
	obj := eventstore.EtcdBackupObject("acme", "b1", "uid-1")
	_, err := b.Put(ctx, obj, bytes.NewReader(make([]byte, 200<<10)))
	require.NoError(t, err)
	// What a killed put leaves: chunks under a nuid no object names.
	_, err = env.Store.JetStream().Publish(ctx, "$O."+eventstore.EtcdBackupBucket+".C.orphan", []byte("partial"))
	require.NoError(t, err)
	n, err := b.SweepPartial(ctx, time.Hour)
	require.NoError(t, err)
	require.Zero(t, n, "chunks stored a moment ago may be a put in flight")
	n, err = b.SweepPartial(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = b.SweepPartial(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	rc, err := b.Open(ctx, obj)
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.Len(t, got, 200<<10)
	rc.Close()
}
