package etcdsnapshot

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Database is what Write lays out as a bolt database.
type Database struct {
	// KeyValues are the live keys, in any order. Each ModRevision (with its
	// Sub) is distinct and at most Revision.
	KeyValues []KeyValue
	// Revision is the store's revision. The database is written as etcd's
	// is right after a compaction at Revision: the latest revision of each
	// live key, no tombstones, and the compaction recorded in the meta
	// bucket, which is how etcd recovers a revision above every key's.
	Revision int64
	// ConsistentIndex and Term are raft's, kept in the meta bucket.
	ConsistentIndex, Term uint64
	// Buckets are further buckets (not etcd's; etcd ignores them).
	Buckets []Bucket
	// FreeBytes is how much free space the database carries, rounded up to
	// whole pages: pages no bucket reaches, as a database has after
	// compactions free what it held. Their bytes are a filler made as they
	// stream, never held, so a large snapshot costs no memory.
	FreeBytes int64
}

// Bucket is a bucket of Database: its items are written in key order.
type Bucket struct {
	Name  []byte
	Items []Item
}

// Item is one key and value of a bucket.
type Item struct{ Key, Value []byte }

// PageSize is the page size of the databases Write makes (bbolt's default on
// the usual 4 KiB-page systems).
const PageSize = 4096

// Bolt's on-disk format (go.etcd.io/bbolt/internal/common): pages start
// with a 16-byte header; leaf elements and branch elements are 16 bytes; the
// numbers are in the host's byte order, little-endian on every platform
// Talos and etcd run on.
const (
	pageHeaderSize   = 16
	elementSize      = 16
	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	metaPageFlag     = 0x04
	bucketLeafFlag   = 0x01
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	noFreelist       = ^uint64(0)
	metaChecksumSpan = 56 // the meta fields before the checksum
	maxPageElements  = 0xFFFF
)

var le = binary.LittleEndian

// layout is a database's pages, in id order: each page's id is the number
// of pages before it (counting overflow pages).
type layout struct {
	pages []*page
	root  uint64 // the root bucket's page
	hwm   uint64 // the high water mark: pages in use, free ones included
	free  uint64 // free pages, at the end
}

// page is a leaf or branch page being laid out.
type page struct {
	id       uint64
	leaf     bool
	elems    []elem
	overflow uint32
}

// elem is a leaf's key and value (flags marks a bucket) or a branch's first
// key of child.
type elem struct {
	key, value []byte
	flags      uint32
	child      uint64
}

func (p *page) size() int {
	n := pageHeaderSize
	for _, e := range p.elems {
		n += elementSize + len(e.key) + len(e.value)
	}
	return n
}

// plan lays d out.
func plan(d *Database) (*layout, error) {
	if d.Revision < 0 || d.FreeBytes < 0 {
		return nil, fmt.Errorf("etcd snapshot: negative revision or free space")
	}
	keys, err := keyItems(d)
	if err != nil {
		return nil, err
	}
	buckets := []Bucket{{Name: KeyBucket, Items: keys}, {Name: MetaBucket, Items: metaItems(d)}}
	for _, b := range d.Buckets {
		if bytes.Equal(b.Name, KeyBucket) || bytes.Equal(b.Name, MetaBucket) || len(b.Name) == 0 {
			return nil, fmt.Errorf("etcd snapshot: bucket %q is etcd's or empty", b.Name)
		}
		items := slices.Clone(b.Items)
		slices.SortFunc(items, func(a, b Item) int { return bytes.Compare(a.Key, b.Key) })
		buckets = append(buckets, Bucket{Name: b.Name, Items: items})
	}
	slices.SortFunc(buckets, func(a, b Bucket) int { return bytes.Compare(a.Name, b.Name) })
	l := &layout{hwm: 2} // pages 0 and 1 are the metas
	var rootElems []elem
	for i, b := range buckets {
		if i > 0 && bytes.Equal(b.Name, buckets[i-1].Name) {
			return nil, fmt.Errorf("etcd snapshot: bucket %q twice", b.Name)
		}
		elems := make([]elem, len(b.Items))
		for j, it := range b.Items {
			if j > 0 && bytes.Equal(it.Key, b.Items[j-1].Key) {
				return nil, fmt.Errorf("etcd snapshot: key %q twice in bucket %q", it.Key, b.Name)
			}
			elems[j] = elem{key: it.Key, value: it.Value}
		}
		root := l.tree(elems)
		// A bucket's value is its header: the root page and a sequence.
		hdr := make([]byte, 16)
		le.PutUint64(hdr, root)
		rootElems = append(rootElems, elem{key: b.Name, value: hdr, flags: bucketLeafFlag})
	}
	l.root = l.tree(rootElems)
	l.free = (uint64(d.FreeBytes) + PageSize - 1) / PageSize
	l.hwm += l.free
	return l, nil
}

// tree lays out a B+tree of the sorted elems (one empty leaf when there are
// none) and answers its root page.
func (l *layout) tree(elems []elem) uint64 {
	level := l.pack(elems, true)
	for len(level) > 1 {
		up := make([]elem, len(level))
		for i, p := range level {
			up[i] = elem{key: p.elems[0].key, child: p.id}
		}
		level = l.pack(up, false)
	}
	return level[0].id
}

// pack fills pages with elems in order, each as full as a page allows (a
// lone element too large for one page gets overflow pages), and gives them
// the next ids.
func (l *layout) pack(elems []elem, leaf bool) []*page {
	var out []*page
	cur := &page{leaf: leaf}
	for _, e := range elems {
		sz := elementSize + len(e.key) + len(e.value)
		if len(cur.elems) > 0 && (cur.size()+sz > PageSize || len(cur.elems) == maxPageElements) {
			out = append(out, cur)
			cur = &page{leaf: leaf}
		}
		cur.elems = append(cur.elems, e)
	}
	out = append(out, cur)
	for _, p := range out {
		p.id = l.hwm
		p.overflow = uint32((p.size()+PageSize-1)/PageSize - 1)
		l.hwm += 1 + uint64(p.overflow)
		l.pages = append(l.pages, p)
	}
	return out
}

// keyItems are the key bucket's items: each live key at its revision.
func keyItems(d *Database) ([]Item, error) {
	kvs := slices.Clone(d.KeyValues)
	slices.SortFunc(kvs, func(a, b KeyValue) int {
		return cmp.Or(cmp.Compare(a.ModRevision, b.ModRevision), cmp.Compare(a.Sub, b.Sub))
	})
	items := make([]Item, len(kvs))
	for i, kv := range kvs {
		switch {
		case len(kv.Key) == 0:
			return nil, fmt.Errorf("etcd snapshot: an empty key")
		case kv.ModRevision < 1 || kv.ModRevision > d.Revision || kv.Sub < 0:
			return nil, fmt.Errorf("etcd snapshot: key %s: revision out of (0, %d]", kv, d.Revision)
		case i > 0 && kv.ModRevision == kvs[i-1].ModRevision && kv.Sub == kvs[i-1].Sub:
			return nil, fmt.Errorf("etcd snapshot: keys %s and %s share a revision", kvs[i-1], kv)
		}
		pb := mvccpb.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
			ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
		v, err := pb.Marshal()
		if err != nil {
			return nil, fmt.Errorf("etcd snapshot: encoding key %s: %w", kv, err)
		}
		items[i] = Item{Key: RevisionKey(kv.ModRevision, kv.Sub), Value: v}
	}
	return items, nil
}

// metaItems are the meta bucket's items, as etcd 3.6 keeps them.
func metaItems(d *Database) []Item {
	items := []Item{
		{Key: metaConsistentIndex, Value: uint64Bytes(d.ConsistentIndex)},
		{Key: metaTerm, Value: uint64Bytes(d.Term)},
		{Key: metaStorageVersion, Value: []byte(storageVersion)},
	}
	if d.Revision > 0 {
		items = append(items,
			Item{Key: metaScheduled, Value: RevisionKey(d.Revision, 0)},
			Item{Key: metaFinished, Value: RevisionKey(d.Revision, 0)})
	}
	slices.SortFunc(items, func(a, b Item) int { return bytes.Compare(a.Key, b.Key) })
	return items
}

// Size is the length of d's snapshot (Write's), without writing it.
func Size(d *Database) (int64, error) {
	l, err := plan(d)
	if err != nil {
		return 0, err
	}
	return int64(l.hwm)*PageSize + sha256.Size, nil
}

// Write writes d's snapshot to w: the bolt database, then its SHA-256. The
// same Database always gives the same bytes.
func Write(w io.Writer, d *Database) (int64, error) {
	l, err := plan(d)
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(io.MultiWriter(cw, h), 64<<10)
	buf := make([]byte, PageSize)
	for id := range uint64(2) {
		clear(buf)
		l.writeMeta(buf, id)
		if _, err := bw.Write(buf); err != nil {
			return cw.n, err
		}
	}
	for _, p := range l.pages {
		b := p.encode()
		if _, err := bw.Write(b); err != nil {
			return cw.n, err
		}
	}
	for i := range l.free {
		if _, err := bw.Write(filler(i)); err != nil {
			return cw.n, err
		}
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	_, err = cw.Write(h.Sum(nil))
	return cw.n, err
}

// writeMeta writes meta page id. Both metas describe the same database;
// bolt reads the one of the higher transaction id that checks out, here
// page 0 (bolt puts transaction t's meta on page t mod 2).
func (l *layout) writeMeta(b []byte, id uint64) {
	le.PutUint64(b, id)
	le.PutUint16(b[8:], metaPageFlag)
	m := b[pageHeaderSize:]
	le.PutUint32(m, boltMagic)
	le.PutUint32(m[4:], boltVersion)
	le.PutUint32(m[8:], PageSize)
	le.PutUint32(m[12:], 0) // flags
	le.PutUint64(m[16:], l.root)
	le.PutUint64(m[24:], 0) // the root bucket's sequence
	le.PutUint64(m[32:], noFreelist)
	le.PutUint64(m[40:], l.hwm)
	le.PutUint64(m[48:], 2-id) // txid: 2 on page 0, 1 on page 1
	f := fnv.New64a()
	f.Write(m[:metaChecksumSpan])
	le.PutUint64(m[metaChecksumSpan:], f.Sum64())
}

// encode is the page's bytes, its overflow pages included.
func (p *page) encode() []byte {
	b := make([]byte, (1+int(p.overflow))*PageSize)
	le.PutUint64(b, p.id)
	flags := uint16(branchPageFlag)
	if p.leaf {
		flags = leafPageFlag
	}
	le.PutUint16(b[8:], flags)
	le.PutUint16(b[10:], uint16(len(p.elems)))
	le.PutUint32(b[12:], p.overflow)
	data := pageHeaderSize + elementSize*len(p.elems)
	for i, e := range p.elems {
		at := pageHeaderSize + elementSize*i
		pos := uint32(data - at) // from the element to its key
		if p.leaf {
			le.PutUint32(b[at:], e.flags)
			le.PutUint32(b[at+4:], pos)
			le.PutUint32(b[at+8:], uint32(len(e.key)))
			le.PutUint32(b[at+12:], uint32(len(e.value)))
		} else {
			le.PutUint32(b[at:], pos)
			le.PutUint32(b[at+4:], uint32(len(e.key)))
			le.PutUint64(b[at+8:], e.child)
		}
		data += copy(b[data:], e.key)
		data += copy(b[data:], e.value)
	}
	return b
}

// fillerPeriod is the period of the free pages' filler: prime, so it does
// not line up with pages.
const fillerPeriod = 251

// fillerBlock holds a page of filler from every phase of the period.
var fillerBlock = func() []byte {
	b := make([]byte, PageSize+fillerPeriod)
	for i := range b {
		b[i] = byte(i % fillerPeriod)
	}
	return b
}()

// filler is free page i's bytes: byte j of the free space is j mod 251.
func filler(i uint64) []byte {
	start := (i * PageSize) % fillerPeriod
	return fillerBlock[start : start+PageSize]
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
