package emulator

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/rezuscloud/rezuscloud/talos/etcdsnapshot"
)

func snapshotBytes(t *testing.T, s *etcdState) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, writeSnapshot(&buf, s))
	size, err := s.snapshotSize()
	require.NoError(t, err)
	require.EqualValues(t, size, buf.Len(), "snapshotSize agrees with what is written")
	require.Equal(t, sha256.Size, buf.Len()%512, "sized like a bolt database and its hash, as talosctl checks")
	return buf.Bytes()
}

// etcdWith is an etcdState as writes through the API make it.
func etcdWith(cluster string, padding int64, kv ...string) *etcdState {
	s := freshEtcd(cluster)
	for i := 0; i < len(kv); i += 2 {
		s.put(kv[i], kv[i+1])
	}
	s.Padding = padding
	return s
}

// TestSnapshotRoundTrip: a snapshot reads back as the state it was made of,
// the same state always gives the same bytes, the last 32 bytes are the
// SHA-256 of the rest, and the database is etcd's: each live key at its
// revision in the key bucket, as bbolt (etcdutl's reader) sees it.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	deleted := etcdWith("c", 0, "/registry/a", "1", "/registry/b", "2", "/registry/a", "3")
	deleted.del("/registry/b")
	for _, tc := range []struct {
		name string
		s    *etcdState
		keys []string // the key bucket: "<mod revision> <key>"
	}{
		{"fresh", freshEtcd("c"), nil},
		{"keys", etcdWith("c", 0, "/registry/a", "1", "b", "ünïcode\n\"quoted\"\x00"), []string{"2 /registry/a", "3 b"}},
		{"overwritten and deleted", deleted, []string{"4 /registry/a"}},
		{"padded", etcdWith("c", 3<<20+1000, "k", "v"), []string{"2 k"}},
		{"persisted without revisions", &etcdState{Cluster: "c", Revision: 7, Keys: map[string]string{"x": "1", "y": "2"}}, []string{"7 x", "7 y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := snapshotBytes(t, tc.s)
			require.Equal(t, b, snapshotBytes(t, tc.s), "deterministic")
			sum := sha256.Sum256(b[:len(b)-sha256.Size])
			require.Equal(t, sum[:], b[len(b)-sha256.Size:])
			if tc.s.Padding > 0 {
				require.Greater(t, int64(len(b)), tc.s.Padding, "the padding is in the snapshot")
			}

			path := filepath.Join(t.TempDir(), "snap.db")
			require.NoError(t, os.WriteFile(path, b, 0o600))
			db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
			require.NoError(t, err)
			var keys []string
			require.NoError(t, db.View(func(tx *bolt.Tx) error {
				for err := range tx.Check() {
					require.NoError(t, err)
				}
				return tx.Bucket([]byte("key")).ForEach(func(k, v []byte) error {
					var kv mvccpb.KeyValue
					require.NoError(t, kv.Unmarshal(v))
					require.Equal(t, etcdsnapshot.RevisionKey(kv.ModRevision, 0)[:8], k[:8])
					keys = append(keys, string(rune('0'+kv.ModRevision))+" "+string(kv.Key))
					return nil
				})
			}))
			require.NoError(t, db.Close())
			require.Equal(t, tc.keys, keys)

			got, err := readSnapshot(bytes.NewReader(b), t.TempDir())
			require.NoError(t, err)
			require.Equal(t, tc.s.Cluster, got.Cluster)
			require.Equal(t, tc.s.Revision, got.Revision)
			require.Equal(t, tc.s.Padding, got.Padding)
			want := tc.s.Keys
			require.Equal(t, want, got.Keys)
			again := snapshotBytes(t, got)
			require.Equal(t, b, again, "read back, it writes the same snapshot")
		})
	}
}

// TestSnapshotRefused: damage is refused as errSnapshot, never a panic.
func TestSnapshotRefused(t *testing.T) {
	t.Parallel()
	good := snapshotBytes(t, etcdWith("c", 100_000, "k", "v"))
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	resealed := func(b []byte) []byte {
		sum := sha256.Sum256(b)
		return append(bytes.Clone(b), sum[:]...)
	}
	body := good[:len(good)-sha256.Size]
	// The emulator's bucket says 9 TB of padding; no free pages stand for it.
	d := etcdWith("c", 0).database(false)
	d.Buckets[0].Items[1].Value = []byte("9999999999999")
	var buf bytes.Buffer
	_, err := etcdsnapshot.Write(&buf, d)
	require.NoError(t, err)
	overPadding := buf.Bytes()
	for name, b := range map[string][]byte{
		"empty":                 nil,
		"truncated":             good[:len(good)/2],
		"truncated checksum":    good[:len(good)-1],
		"no checksum":           body,
		"altered value":         flip(bytes.Index(good, []byte("k")) + 1),
		"altered free page":     flip(len(good) - sha256.Size - 100),
		"altered checksum":      flip(len(good) - 1),
		"trailing bytes":        append(bytes.Clone(good), 0),
		"not bolt, resealed":    resealed([]byte("SQLite format 3\x00 and more bytes than the header")),
		"padding not a number":  resealed(bytes.Replace(body, []byte("100000"), []byte("1x0000"), 1)),
		"padding over the max":  overPadding,
		"half a bolt, resealed": resealed(body[:2*etcdsnapshot.PageSize]),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readSnapshot(bytes.NewReader(b), t.TempDir())
			require.ErrorIs(t, err, errSnapshot)
		})
	}
}

// TestSnapshotKeyspaceLimit: a snapshot whose keys would not fit the
// emulator's keyspace is refused.
func TestSnapshotKeyspaceLimit(t *testing.T) {
	t.Parallel()
	d := &etcdsnapshot.Database{Revision: 10}
	for i := range 8 {
		d.KeyValues = append(d.KeyValues, etcdsnapshot.KeyValue{Key: []byte{'k', byte('0' + i)},
			Value: bytes.Repeat([]byte{'v'}, maxEtcdValue), ModRevision: int64(i + 2), CreateRevision: int64(i + 2), Version: 1})
	}
	var buf bytes.Buffer
	_, err := etcdsnapshot.Write(&buf, d)
	require.NoError(t, err)
	_, err = readSnapshot(&buf, t.TempDir())
	require.ErrorIs(t, err, errSnapshot)
}
