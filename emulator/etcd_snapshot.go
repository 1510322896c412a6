package emulator

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/rezuscloud/rezuscloud/talos/etcdsnapshot"
)

// An emulated etcd snapshot is what real etcd streams: its bolt database,
// laid out as etcd's (the mvcc "key" bucket, one revision key per live key
// with its mvccpb.KeyValue; the "meta" bucket, with the compaction at the
// store revision that lets etcd restore it), then the SHA-256 of the bytes
// before it (talos/etcdsnapshot writes and reads it). talosctl, etcdutl and
// a real etcd read it as any other. The emulator's own facts (the cluster it
// was taken of, the padding) are in a bucket of their own, which etcd
// ignores; padding is free pages, as a database that compactions thinned
// carries, made as they stream and never held. The same etcd state always
// gives the same bytes. A recovery takes a real etcd's snapshot as well:
// its live keys at its revision.

// emulatorBucket holds what the emulator knows of a snapshot beyond etcd's data.
var (
	emulatorBucket = []byte("rezus-emulator")
	itemCluster    = []byte("cluster")
	itemPadding    = []byte("padding")
)

// Bounds on what a snapshot may hold. The keyspace lives in memory, so it is
// small; padding stands for a large database and is never held.
const (
	// maxKeyspaceBytes bounds the keys and values of a cluster (keyspaceBytes).
	maxKeyspaceBytes = 8 << 20
	// maxPadding is etcd's largest recommended backend quota (8 GiB).
	maxPadding = 8 << 30
	// maxSnapshot bounds an uploaded snapshot: a full keyspace in bolt pages
	// (a page can be half empty, and each key costs its revision key and
	// encoding) and the largest padding.
	maxSnapshot = 4*maxKeyspaceBytes + maxPadding + 1<<20
	// snapshotChunk is the size of the common.Data messages a snapshot is streamed in.
	snapshotChunk = 1 << 20
)

// etcdState is one cluster's etcd data: its keys, their revisions and the
// store revision (1 after bootstrap, +1 per write), and padding, free space
// a snapshot carries to stand for a large database. A stored etcdState is
// never modified: a write replaces it, so a snapshot can stream one without
// a lock.
type etcdState struct {
	Cluster  string            `json:"cluster"`
	Revision int64             `json:"revision"`
	Keys     map[string]string `json:"keys"`
	// Revs are each key's revisions, as etcd's KeyValue carries them. A key
	// without (state persisted before they were kept) reads as written at
	// the store revision (keyRevsOf).
	Revs    map[string]keyRevs `json:"revs,omitempty"`
	Padding int64              `json:"padding,omitempty"`
}

// keyRevs are a key's revisions: of its creation, of its last change (with
// the change's index within its revision's transaction) and how many changes
// since its creation.
type keyRevs struct {
	Create  int64 `json:"create"`
	Mod     int64 `json:"mod"`
	Sub     int64 `json:"sub,omitempty"`
	Version int64 `json:"version"`
	Lease   int64 `json:"lease,omitempty"`
}

// keyOverhead is what each key costs beyond its bytes, so that many tiny
// keys are bounded too.
const keyOverhead = 16

// keyspaceBytes is the summed length of the keys and values, with keyOverhead per key.
func (s *etcdState) keyspaceBytes() int {
	n := 0
	for k, v := range s.Keys {
		n += len(k) + len(v) + keyOverhead
	}
	return n
}

// put writes a key at the next revision, as etcd's Put.
func (s *etcdState) put(key, value string) {
	s.Revision++
	r, ok := s.keyRevsOf(key)
	if !ok {
		r = keyRevs{Create: s.Revision}
	}
	r.Mod, r.Sub, r.Version = s.Revision, 0, r.Version+1
	s.Keys[key] = value
	s.Revs[key] = r
}

// del deletes a key at the next revision.
func (s *etcdState) del(key string) {
	s.Revision++
	delete(s.Keys, key)
	delete(s.Revs, key)
}

// keyRevsOf is a key's revisions. Keys without any (persisted before the
// emulator kept them) are taken as written by one transaction at the store
// revision, one sub revision each in key order, which keeps every key's
// revision distinct and none above the store's.
func (s *etcdState) keyRevsOf(key string) (keyRevs, bool) {
	if _, ok := s.Keys[key]; !ok {
		return keyRevs{}, false
	}
	if r, ok := s.Revs[key]; ok {
		return r, true
	}
	var missing []string
	for k := range s.Keys {
		if _, ok := s.Revs[k]; !ok {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	sub := int64(slices.Index(missing, key))
	return keyRevs{Create: s.Revision, Mod: s.Revision, Sub: sub, Version: 1}, true
}

// database is the bolt database of s; free says whether it carries the
// padding as free pages (a snapshot) or only records it (the emulator's own
// files).
func (s *etcdState) database(free bool) *etcdsnapshot.Database {
	d := &etcdsnapshot.Database{Revision: s.Revision, ConsistentIndex: uint64(max(s.Revision, 0)), Term: 1}
	var missing []string // keys without revisions, see keyRevsOf
	for k := range s.Keys {
		if _, ok := s.Revs[k]; !ok {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	for k, v := range s.Keys {
		r, ok := s.Revs[k]
		if !ok {
			sub, _ := slices.BinarySearch(missing, k)
			r = keyRevs{Create: s.Revision, Mod: s.Revision, Sub: int64(sub), Version: 1}
		}
		d.KeyValues = append(d.KeyValues, etcdsnapshot.KeyValue{Key: []byte(k), Value: []byte(v),
			CreateRevision: r.Create, ModRevision: r.Mod, Sub: r.Sub, Version: r.Version, Lease: r.Lease})
	}
	d.Buckets = []etcdsnapshot.Bucket{{Name: emulatorBucket, Items: []etcdsnapshot.Item{
		{Key: itemCluster, Value: []byte(s.Cluster)},
		{Key: itemPadding, Value: strconv.AppendInt(nil, s.Padding, 10)},
	}}}
	if free {
		d.FreeBytes = s.Padding
	}
	return d
}

// snapshotSize is the length of the snapshot of s, or an error if s cannot be encoded.
func (s *etcdState) snapshotSize() (int64, error) {
	return etcdsnapshot.Size(s.database(true))
}

// writeSnapshot writes the snapshot of s to w.
func writeSnapshot(w io.Writer, s *etcdState) error {
	_, err := etcdsnapshot.Write(w, s.database(true))
	return err
}

// encodeEtcd is the database the emulator keeps s in on disk: the
// snapshot's layout without the free pages.
func encodeEtcd(s *etcdState) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := etcdsnapshot.Write(&buf, s.database(false)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// errSnapshot marks a snapshot that is malformed, truncated or altered.
var errSnapshot = etcdsnapshot.ErrInvalid

func snapshotErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errSnapshot, fmt.Sprintf(format, args...))
}

// readSnapshot reads and checks a snapshot from r to its end: it is spooled
// to a file in dir (os.TempDir() when ""), its SHA-256 checked, and its live
// keys read at its revision, whether the emulator or a real etcd made it.
// Errors wrap errSnapshot when the bytes are at fault, else they are r's.
func readSnapshot(r io.Reader, dir string) (*etcdState, error) {
	path, err := etcdsnapshot.Spool(r, dir, maxSnapshot)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	return readEtcdFile(path)
}

// readEtcdFile reads the etcd state in the bolt database at path.
func readEtcdFile(path string) (*etcdState, error) {
	db, err := etcdsnapshot.Open(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	info, err := db.Info()
	if err != nil {
		return nil, err
	}
	kvs, err := db.LiveKeys(maxKeyspaceBytes, keyOverhead)
	if err != nil {
		return nil, err
	}
	// etcd's store starts at revision 1, even with nothing written.
	s := &etcdState{Revision: max(info.Revision, 1), Keys: make(map[string]string, len(kvs)), Revs: make(map[string]keyRevs, len(kvs))}
	for _, kv := range kvs {
		s.Keys[string(kv.Key)] = string(kv.Value)
		s.Revs[string(kv.Key)] = keyRevs{Create: kv.CreateRevision, Mod: kv.ModRevision, Sub: kv.Sub, Version: kv.Version, Lease: kv.Lease}
	}
	items, ok, err := db.Bucket(emulatorBucket, 64<<10)
	if err != nil || !ok {
		return s, err
	}
	for _, it := range items {
		switch {
		case bytes.Equal(it.Key, itemCluster):
			s.Cluster = string(it.Value)
		case bytes.Equal(it.Key, itemPadding):
			p, err := strconv.ParseInt(string(it.Value), 10, 64)
			if err != nil || p < 0 || p > maxPadding {
				return nil, snapshotErrorf("padding %q is out of range [0, %d]", it.Value, int64(maxPadding))
			}
			s.Padding = p
		}
	}
	return s, nil
}

// validText reports why a key or value cannot be written through the HTTP
// API (its JSON carries text), or "" if it can.
func validText(what, s string) string {
	if !utf8.ValidString(s) {
		return what + " is not valid UTF-8"
	}
	return ""
}
