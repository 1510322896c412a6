package etcdsnapshot

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// writeFile writes d's snapshot to a file and answers its path and bytes.
func writeFile(t *testing.T, d *Database) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	n, err := Write(&buf, d)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)
	size, err := Size(d)
	require.NoError(t, err)
	require.Equal(t, n, size, "Size is what Write writes")
	path := filepath.Join(t.TempDir(), "snap.db")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	return path, buf.Bytes()
}

// checkBolt opens path with bbolt as etcdutl's snapshot status does and runs
// its integrity check.
func checkBolt(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		var errs []string
		for err := range tx.Check() {
			errs = append(errs, err.Error())
		}
		require.Empty(t, errs)
		return nil
	}))
}

func TestWriteIsABoltDatabaseLaidOutAsEtcds(t *testing.T) {
	big := bytes.Repeat([]byte("v"), 1<<20+123) // a value spanning overflow pages
	d := &Database{
		Revision:        9,
		ConsistentIndex: 42,
		Term:            3,
		KeyValues: []KeyValue{
			{Key: []byte("/registry/b"), Value: []byte("2"), CreateRevision: 3, ModRevision: 5, Version: 2},
			{Key: []byte("/registry/a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1},
			{Key: []byte("/registry/big"), Value: big, CreateRevision: 7, ModRevision: 7, Version: 1},
		},
		Buckets:   []Bucket{{Name: []byte("rezus-emulator"), Items: []Item{{Key: []byte("padding"), Value: []byte("5000")}, {Key: []byte("cluster"), Value: []byte("c1")}}}},
		FreeBytes: 5000,
	}
	path, raw := writeFile(t, d)
	require.Equal(t, sha256.Size, len(raw)%512, "talosctl's check: a multiple of 512 and the sha256")
	sum := sha256.Sum256(raw[:len(raw)-sha256.Size])
	require.Equal(t, sum[:], raw[len(raw)-sha256.Size:])
	checkBolt(t, path)

	again, err := Write(new(bytes.Buffer), d)
	require.NoError(t, err)
	require.Equal(t, int64(len(raw)), again)
	var b2 bytes.Buffer
	_, err = Write(&b2, d)
	require.NoError(t, err)
	require.Equal(t, raw, b2.Bytes(), "the same database gives the same bytes")

	// What etcd reads: revision keys in the key bucket with mvccpb values.
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	var got []string
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		require.NotNil(t, tx.Bucket([]byte("meta")))
		require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 42}, tx.Bucket([]byte("meta")).Get([]byte("consistent_index")))
		require.Equal(t, RevisionKey(9, 0), tx.Bucket([]byte("meta")).Get([]byte("finishedCompactRev")))
		return tx.Bucket([]byte("key")).ForEach(func(k, v []byte) error {
			var kv mvccpb.KeyValue
			require.NoError(t, kv.Unmarshal(v))
			got = append(got, fmt.Sprintf("%x %s %d", k, kv.Key, kv.ModRevision))
			return nil
		})
	}))
	require.NoError(t, db.Close())
	require.Equal(t, []string{
		fmt.Sprintf("%x /registry/a 2", RevisionKey(2, 0)),
		fmt.Sprintf("%x /registry/b 5", RevisionKey(5, 0)),
		fmt.Sprintf("%x /registry/big 7", RevisionKey(7, 0)),
	}, got)

	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	info, err := r.Info()
	require.NoError(t, err)
	require.Equal(t, Info{Revision: 9, CompactRevision: 9, ConsistentIndex: 42, Term: 3}, info,
		"the store revision is the compaction's, above every key's")
	kvs, err := r.LiveKeys(4<<20, 0)
	require.NoError(t, err)
	require.Len(t, kvs, 3)
	require.Equal(t, KeyValue{Key: []byte("/registry/a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1}, kvs[0])
	require.Equal(t, big, kvs[2].Value)
	items, ok, err := r.Bucket([]byte("rezus-emulator"), 1024)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []Item{{Key: []byte("cluster"), Value: []byte("c1")}, {Key: []byte("padding"), Value: []byte("5000")}}, items)
	_, ok, err = r.Bucket([]byte("nope"), 1024)
	require.NoError(t, err)
	require.False(t, ok)
	_, err = r.LiveKeys(100, 0)
	require.ErrorIs(t, err, ErrInvalid, "a keyspace over the limit")
}

func TestWriteManyKeysMakesBranchPages(t *testing.T) {
	d := &Database{Revision: 20001}
	for i := range 20000 {
		d.KeyValues = append(d.KeyValues, KeyValue{Key: fmt.Appendf(nil, "/registry/k%06d", i),
			Value: bytes.Repeat([]byte{'x'}, i%300), CreateRevision: int64(i + 2), ModRevision: int64(i + 2), Version: 1})
	}
	path, _ := writeFile(t, d)
	checkBolt(t, path)
	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	info, err := r.Info()
	require.NoError(t, err)
	require.Equal(t, int64(20001), info.Revision)
	kvs, err := r.LiveKeys(64<<20, 0)
	require.NoError(t, err)
	require.Len(t, kvs, 20000)
	require.Equal(t, "/registry/k019999", string(kvs[19999].Key))
	require.Equal(t, int64(20001), kvs[19999].ModRevision)
}

func TestWriteEmptyAndRefusals(t *testing.T) {
	path, _ := writeFile(t, &Database{})
	checkBolt(t, path)
	info, err := ReadInfo(path)
	require.NoError(t, err)
	require.Equal(t, Info{}, info)

	for name, d := range map[string]*Database{
		"revision above the store's": {Revision: 1, KeyValues: []KeyValue{{Key: []byte("k"), ModRevision: 2}}},
		"shared revision":            {Revision: 3, KeyValues: []KeyValue{{Key: []byte("a"), ModRevision: 2}, {Key: []byte("b"), ModRevision: 2}}},
		"empty key":                  {Revision: 3, KeyValues: []KeyValue{{ModRevision: 2}}},
		"etcd's bucket":              {Buckets: []Bucket{{Name: []byte("key")}}},
		"negative free space":        {FreeBytes: -1},
	} {
		_, err := Size(d)
		require.Error(t, err, name)
	}
}

// realEtcd builds, with bbolt directly, a database as a running etcd
// leaves it: history (several revisions of a key, a transaction's sub
// revisions, a deletion's tombstone), a compaction recorded in meta, the
// meta bucket small enough to be inline, and other buckets of etcd's.
func realEtcd(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "member.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
	require.NoError(t, err)
	put := func(tx *bolt.Tx, main, sub int64, tomb bool, kv *mvccpb.KeyValue) {
		k := RevisionKey(main, sub)
		if tomb {
			k = TombstoneKey(main, sub)
		}
		v, err := kv.Marshal()
		require.NoError(t, err)
		require.NoError(t, tx.Bucket([]byte("key")).Put(k, v))
	}
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, b := range []string{"key", "meta", "lease", "members", "cluster", "alarm"} {
			_, err := tx.CreateBucket([]byte(b))
			require.NoError(t, err)
		}
		put(tx, 2, 0, false, &mvccpb.KeyValue{Key: []byte("/a"), Value: []byte("a1"), CreateRevision: 2, ModRevision: 2, Version: 1})
		put(tx, 3, 0, false, &mvccpb.KeyValue{Key: []byte("/a"), Value: []byte("a2"), CreateRevision: 2, ModRevision: 3, Version: 2})
		put(tx, 4, 0, false, &mvccpb.KeyValue{Key: []byte("/b"), Value: []byte("b1"), CreateRevision: 4, ModRevision: 4, Version: 1})
		put(tx, 4, 1, false, &mvccpb.KeyValue{Key: []byte("/c"), Value: []byte("c1"), CreateRevision: 4, ModRevision: 4, Version: 1, Lease: 7})
		put(tx, 5, 0, true, &mvccpb.KeyValue{Key: []byte("/b")})
		m := tx.Bucket([]byte("meta"))
		require.NoError(t, m.Put([]byte("consistent_index"), uint64Bytes(77)))
		require.NoError(t, m.Put([]byte("term"), uint64Bytes(2)))
		require.NoError(t, m.Put([]byte("finishedCompactRev"), RevisionKey(3, 0)))
		require.NoError(t, m.Put([]byte("scheduledCompactRev"), RevisionKey(3, 0)))
		return nil
	}))
	require.NoError(t, db.Close())
	// etcd's snapshot: the database, then the sha256 of it.
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(raw)
	require.NoError(t, os.WriteFile(path, append(raw, sum[:]...), 0o600))
	return path
}

func TestReadsARealEtcdDatabase(t *testing.T) {
	path := realEtcd(t)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	spooled, err := Spool(bytes.NewReader(raw), t.TempDir(), 0)
	require.NoError(t, err)
	r, err := Open(spooled)
	require.NoError(t, err)
	defer r.Close()
	info, err := r.Info()
	require.NoError(t, err)
	require.Equal(t, Info{Revision: 5, CompactRevision: 3, ConsistentIndex: 77, Term: 2}, info,
		"the revision is the tombstone's, the last change")
	kvs, err := r.LiveKeys(1<<20, 0)
	require.NoError(t, err)
	require.Equal(t, []KeyValue{
		{Key: []byte("/a"), Value: []byte("a2"), CreateRevision: 2, ModRevision: 3, Version: 2},
		{Key: []byte("/c"), Value: []byte("c1"), CreateRevision: 4, ModRevision: 4, Sub: 1, Version: 1, Lease: 7},
	}, kvs, "the latest revision of each key; /b's tombstone deletes it")
	_, ok, err := r.Bucket([]byte("rezus-emulator"), 1024)
	require.NoError(t, err)
	require.False(t, ok)

	// Written back, it reads the same.
	path2, _ := writeFile(t, &Database{Revision: info.Revision, KeyValues: kvs, ConsistentIndex: 77, Term: 2})
	checkBolt(t, path2)
	info2, err := ReadInfo(path2)
	require.NoError(t, err)
	require.Equal(t, int64(5), info2.Revision)
}

func TestSpoolChecksTheSnapshot(t *testing.T) {
	_, raw := writeFile(t, &Database{Revision: 2, KeyValues: []KeyValue{{Key: []byte("k"), Value: []byte("v"), ModRevision: 2}}})
	dir := t.TempDir()
	altered := bytes.Clone(raw)
	altered[5000]++
	resealed := func(b []byte) []byte {
		sum := sha256.Sum256(b)
		return append(bytes.Clone(b), sum[:]...)
	}
	body := raw[:len(raw)-sha256.Size]
	// Both metas name a root far past the end, checksums fixed up.
	badRoot := bytes.Clone(body)
	for id := range 2 {
		m := badRoot[id*PageSize+pageHeaderSize:]
		le.PutUint64(m[16:], 1<<40)
		f := fnv.New64a()
		f.Write(m[:metaChecksumSpan])
		le.PutUint64(m[metaChecksumSpan:], f.Sum64())
	}
	// Both metas point the root at a page that is not a leaf or branch.
	badPage := bytes.Clone(body)
	for id := range 2 {
		m := badPage[id*PageSize+pageHeaderSize:]
		le.PutUint64(m[16:], 0)
		f := fnv.New64a()
		f.Write(m[:metaChecksumSpan])
		le.PutUint64(m[metaChecksumSpan:], f.Sum64())
	}
	for name, tc := range map[string]struct {
		b     []byte
		spool bool // Spool takes it (the sha256 is right); Open or Info refuse it
	}{
		"truncated":            {b: raw[:len(raw)-100]},
		"altered":              {b: altered},
		"empty":                {b: nil},
		"too large":            {b: append(bytes.Clone(raw), make([]byte, 1<<20)...)},
		"not bolt, resealed":   {b: resealed([]byte(strings.Repeat("x", 8192))), spool: true},
		"bad root, resealed":   {b: resealed(badRoot), spool: true},
		"meta as root":         {b: resealed(badPage), spool: true},
		"short bolt, resealed": {b: resealed(body[:PageSize*2]), spool: true},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Spool(bytes.NewReader(tc.b), dir, int64(len(raw)))
			if !tc.spool {
				require.ErrorIs(t, err, ErrInvalid)
				return
			}
			require.NoError(t, err)
			_, err = ReadInfo(p)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 4, "a refused spool leaves no file")
}
