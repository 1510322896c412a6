package etcdsnapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"runtime/debug"
	"slices"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ErrInvalid marks a snapshot that is not an etcd snapshot, or is one cut
// short, altered or malformed.
var ErrInvalid = errors.New("invalid etcd snapshot")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Spool copies the snapshot read from r to a new file in dir (os.TempDir()
// when ""), checking as it goes that it ends in the SHA-256 of what precedes
// it and is at most limit bytes (no limit when 0). It answers the file's
// path, which the caller removes; on an error there is no file. Errors wrap
// ErrInvalid when the bytes are at fault, else they are r's or the file's.
func Spool(r io.Reader, dir string, limit int64) (string, error) {
	f, err := os.CreateTemp(dir, "etcd-snapshot-*.db")
	if err != nil {
		return "", fmt.Errorf("spooling an etcd snapshot: %w", err)
	}
	path := f.Name()
	if err := spool(f, r, limit); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("spooling an etcd snapshot: %w", err)
	}
	return path, nil
}

func spool(f *os.File, r io.Reader, limit int64) error {
	if limit > 0 {
		r = io.LimitReader(r, limit+1)
	}
	tr := &trailerHash{h: sha256.New()}
	n, err := io.Copy(io.MultiWriter(f, tr), r)
	switch {
	case err != nil:
		return err
	case limit > 0 && n > limit:
		return invalidf("larger than %d bytes", limit)
	case !tr.ok():
		return invalidf("it does not end in the sha256 of its content (truncated or altered)")
	}
	return nil
}

// trailerHash hashes all but the last sha256.Size bytes written to it.
type trailerHash struct {
	h    hash.Hash
	tail []byte
}

func (t *trailerHash) Write(b []byte) (int, error) {
	if len(b) >= sha256.Size {
		t.h.Write(t.tail)
		t.h.Write(b[:len(b)-sha256.Size])
		t.tail = append(t.tail[:0], b[len(b)-sha256.Size:]...)
		return len(b), nil
	}
	t.tail = append(t.tail, b...)
	if extra := len(t.tail) - sha256.Size; extra > 0 {
		t.h.Write(t.tail[:extra])
		t.tail = append(t.tail[:0], t.tail[extra:]...)
	}
	return len(b), nil
}

func (t *trailerHash) ok() bool {
	return len(t.tail) == sha256.Size && bytes.Equal(t.tail, t.h.Sum(nil))
}

// DB is a snapshot opened for reading.
type DB struct {
	db *bolt.DB
}

// Open opens the snapshot (a bolt database, with or without its SHA-256
// after it) at path for reading. bbolt maps the file and trusts the page
// structure once the metas check out: a malformed page is caught (an
// error wrapping ErrInvalid), a database crafted to loop is not, so open
// snapshots of etcd, Talos or the emulator, checked by their SHA-256.
func Open(path string) (*DB, error) {
	var db *bolt.DB
	err := guard(func() error {
		var err error
		db, err = bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
		if err != nil {
			return invalidf("not a bolt database: %v", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &DB{db: db}, nil
}

// Close closes the database (the file stays).
func (d *DB) Close() error { return d.db.Close() }

// guard runs f, turning a panic or a fault on the mapped file (a malformed
// database) into an error.
func guard(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = invalidf("malformed bolt database: %v", r)
		}
	}()
	return f()
}

// view runs f in a read transaction, guarded.
func (d *DB) view(f func(tx *bolt.Tx) error) error {
	return guard(func() error { return d.db.View(f) })
}

// Info is what a snapshot says about the etcd it was taken of.
type Info struct {
	// Revision is the store revision etcd restores from it: the highest
	// revision in the key bucket, or the last compaction's when higher (a
	// compaction leaves no key at its revision), as etcd's mvcc store
	// recovers it.
	Revision int64
	// CompactRevision is the last finished compaction's revision (0 for none).
	CompactRevision int64
	// ConsistentIndex and Term are raft's, from the meta bucket.
	ConsistentIndex, Term uint64
}

// Info reads the snapshot's revision and meta, without reading its keys.
func (d *DB) Info() (Info, error) {
	var in Info
	err := d.view(func(tx *bolt.Tx) error {
		kb := tx.Bucket(KeyBucket)
		if kb == nil {
			return invalidf("it has no %q bucket", KeyBucket)
		}
		if k, _ := kb.Cursor().Last(); k != nil {
			main, _, _, err := parseRevisionKey(k)
			if err != nil {
				return err
			}
			in.Revision = main
		}
		if mb := tx.Bucket(MetaBucket); mb != nil {
			if v := mb.Get(metaFinished); v != nil {
				main, _, _, err := parseRevisionKey(v)
				if err != nil {
					return fmt.Errorf("%w (%s)", err, metaFinished)
				}
				in.CompactRevision = main
			}
			in.ConsistentIndex = readUint64(mb.Get(metaConsistentIndex))
			in.Term = readUint64(mb.Get(metaTerm))
		}
		in.Revision = max(in.Revision, in.CompactRevision)
		return nil
	})
	return in, err
}

func readUint64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// LiveKeys reads the keys the snapshot holds at its revision, as etcd would
// serve them: the latest revision of each key, unless that is a tombstone.
// The keys and values read are bounded by limit bytes (with overhead bytes
// more per key), so a snapshot too large for the caller fails early. They
// come sorted by key.
func (d *DB) LiveKeys(limit, overhead int) ([]KeyValue, error) {
	live := map[string]KeyValue{}
	size := 0
	err := d.view(func(tx *bolt.Tx) error {
		kb := tx.Bucket(KeyBucket)
		if kb == nil {
			return invalidf("it has no %q bucket", KeyBucket)
		}
		return kb.ForEach(func(k, v []byte) error {
			main, sub, tomb, err := parseRevisionKey(k)
			if err != nil {
				return err
			}
			var pb mvccpb.KeyValue
			if err := pb.Unmarshal(v); err != nil {
				return invalidf("the value at revision %d: %v", main, err)
			}
			if len(pb.Key) == 0 {
				return invalidf("an empty key at revision %d", main)
			}
			if old, ok := live[string(pb.Key)]; ok {
				size -= len(old.Key) + len(old.Value) + overhead
				delete(live, string(pb.Key))
			}
			if tomb {
				return nil
			}
			size += len(pb.Key) + len(pb.Value) + overhead
			if size > limit {
				return invalidf("its keyspace exceeds %d bytes", limit)
			}
			live[string(pb.Key)] = KeyValue{Key: pb.Key, Value: pb.Value, CreateRevision: pb.CreateRevision,
				ModRevision: main, Sub: sub, Version: pb.Version, Lease: pb.Lease}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	out := make([]KeyValue, 0, len(live))
	for _, kv := range live {
		out = append(out, kv)
	}
	slices.SortFunc(out, func(a, b KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	return out, nil
}

// Bucket reads the items of a bucket that is not etcd's (ok false when the
// snapshot has none by that name), at most limit bytes of them.
func (d *DB) Bucket(name []byte, limit int) (items []Item, ok bool, err error) {
	err = d.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(name)
		if b == nil {
			return nil
		}
		ok = true
		size := 0
		return b.ForEach(func(k, v []byte) error {
			size += len(k) + len(v)
			if size > limit {
				return invalidf("bucket %q exceeds %d bytes", name, limit)
			}
			items = append(items, Item{Key: bytes.Clone(k), Value: bytes.Clone(v)})
			return nil
		})
	})
	return items, ok, err
}

// ReadInfo opens the snapshot at path and reads its Info.
func ReadInfo(path string) (Info, error) {
	d, err := Open(path)
	if err != nil {
		return Info{}, err
	}
	defer d.Close()
	return d.Info()
}
