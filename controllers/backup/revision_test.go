package backup

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/rezuscloud/rezuscloud/talos/etcdsnapshot"
)

// realEtcdSnapshot is a snapshot as a real etcd streams it, its database
// built with bbolt directly: the revision (7, a deletion's tombstone) is in
// the key bucket's last key, nowhere near the start, and the meta bucket
// records an older compaction.
func realEtcdSnapshot(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "member.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		kb, err := tx.CreateBucket([]byte("key"))
		require.NoError(t, err)
		mb, err := tx.CreateBucket([]byte("meta"))
		require.NoError(t, err)
		for rev := int64(2); rev <= 6; rev++ {
			kv := mvccpb.KeyValue{Key: []byte("/registry/pods/p"), Value: bytes.Repeat([]byte{'x'}, 3000), CreateRevision: 2, ModRevision: rev, Version: rev - 1}
			v, err := kv.Marshal()
			require.NoError(t, err)
			require.NoError(t, kb.Put(etcdsnapshot.RevisionKey(rev, 0), v))
		}
		v, err := (&mvccpb.KeyValue{Key: []byte("/registry/pods/p")}).Marshal()
		require.NoError(t, err)
		require.NoError(t, kb.Put(etcdsnapshot.TombstoneKey(7, 0), v))
		require.NoError(t, mb.Put([]byte("finishedCompactRev"), etcdsnapshot.RevisionKey(3, 0)))
		return nil
	}))
	require.NoError(t, db.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(raw)
	return append(raw, sum[:]...)
}

// emulatorSnapshot is a snapshot as the emulator writes it: revision 12 is
// the compaction's, above every key's, and free pages make it large.
func emulatorSnapshot(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	_, err := etcdsnapshot.Write(&buf, &etcdsnapshot.Database{Revision: 12, FreeBytes: 1 << 20,
		KeyValues: []etcdsnapshot.KeyValue{{Key: []byte("k"), Value: []byte("v"), CreateRevision: 5, ModRevision: 5, Version: 1}}})
	require.NoError(t, err)
	return buf.Bytes()
}

func TestSnapshotRevision(t *testing.T) {
	for _, tc := range []struct {
		name string
		snap []byte
		want int64
	}{
		{"real etcd", realEtcdSnapshot(t), 7},
		{"emulator", emulatorSnapshot(t), 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// As take does: the snapshot tees into the spool as it streams.
			sp := newSpoolFile(dir)
			_, err := io.Copy(io.Discard, io.TeeReader(bytes.NewReader(tc.snap), sp))
			require.NoError(t, err)
			rev, ok := sp.revision()
			require.True(t, ok)
			require.Equal(t, tc.want, rev)

			// As the check after a restore does.
			rev, err = snapshotRevision(bytes.NewReader(tc.snap), dir)
			require.NoError(t, err)
			require.Equal(t, tc.want, rev)

			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "the copies are removed")
		})
	}
}

func TestSnapshotRevisionUnknown(t *testing.T) {
	dir := t.TempDir()
	sp := newSpoolFile(dir)
	_, err := sp.Write([]byte("not a bolt database at all, but long enough to be looked at"))
	require.NoError(t, err)
	_, ok := sp.revision()
	require.False(t, ok)

	snap := realEtcdSnapshot(t)
	snap[len(snap)/2] ^= 1
	_, err = snapshotRevision(bytes.NewReader(snap), dir)
	require.ErrorIs(t, err, etcdsnapshot.ErrInvalid, "a damaged snapshot says nothing")

	sp = newSpoolFile(filepath.Join(dir, "missing"))
	_, err = sp.Write([]byte("x"))
	require.NoError(t, err, "a copy that cannot be made does not stop the stream")
	_, ok = sp.revision()
	require.False(t, ok)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}
