package etcdsnapshot

import (
	"encoding/binary"
	"fmt"
)

// The names etcd's storage schema (go.etcd.io/etcd/server/v3/storage/schema)
// gives its buckets and meta keys.
var (
	// KeyBucket holds every revision of every key: keys are revision keys
	// (RevisionKey), values mvccpb.KeyValue messages.
	KeyBucket = []byte("key")
	// MetaBucket holds the backend's bookkeeping.
	MetaBucket = []byte("meta")

	metaConsistentIndex = []byte("consistent_index")
	metaTerm            = []byte("term")
	metaScheduled       = []byte("scheduledCompactRev")
	metaFinished        = []byte("finishedCompactRev")
	metaStorageVersion  = []byte("storageVersion")
)

// storageVersion is the storage schema version written, etcd 3.6's.
const storageVersion = "3.6.0"

// Revision keys, as etcd's mvcc writes them: the main revision (8 bytes,
// big-endian), '_', the sub revision (8 bytes), and a trailing 't' on a
// tombstone (the key's deletion). Big-endian makes byte order revision order.
const (
	revKeyLen       = 17
	tombstoneKeyLen = 18
	revSeparator    = '_'
	tombstoneMark   = 't'
)

// RevisionKey is the key-bucket key of the change sub of revision main.
func RevisionKey(main, sub int64) []byte {
	b := make([]byte, revKeyLen)
	binary.BigEndian.PutUint64(b, uint64(main))
	b[8] = revSeparator
	binary.BigEndian.PutUint64(b[9:], uint64(sub))
	return b
}

// TombstoneKey is the key-bucket key of a deletion at main, sub.
func TombstoneKey(main, sub int64) []byte {
	return append(RevisionKey(main, sub), tombstoneMark)
}

// parseRevisionKey reads a key-bucket key.
func parseRevisionKey(k []byte) (main, sub int64, tombstone bool, err error) {
	switch {
	case len(k) == tombstoneKeyLen && k[revKeyLen] == tombstoneMark:
		tombstone = true
	case len(k) != revKeyLen:
		return 0, 0, false, invalidf("key bucket key %x is not a revision", k)
	}
	if k[8] != revSeparator {
		return 0, 0, false, invalidf("key bucket key %x is not a revision", k)
	}
	main, sub = int64(binary.BigEndian.Uint64(k)), int64(binary.BigEndian.Uint64(k[9:]))
	if main < 0 || sub < 0 {
		return 0, 0, false, invalidf("key bucket key %x has a negative revision", k)
	}
	return main, sub, tombstone, nil
}

func uint64Bytes(v uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, v)
}

// KeyValue is one live key of a snapshot, as etcd's mvccpb.KeyValue holds it.
type KeyValue struct {
	Key, Value []byte
	// CreateRevision is the revision of the key's creation, ModRevision of
	// its last change; Version counts its changes since its creation.
	CreateRevision, ModRevision, Version int64
	// Sub is the last change's index among the changes of its revision
	// (0 unless one transaction changed several keys).
	Sub int64
	// Lease is the id of the lease attached to the key, 0 for none.
	Lease int64
}

func (kv KeyValue) String() string {
	return fmt.Sprintf("%q@%d", kv.Key, kv.ModRevision)
}
