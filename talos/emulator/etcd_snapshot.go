package emulator

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"unicode/utf8"
)

// An emulated etcd snapshot is what EtcdSnapshot streams and EtcdRecover
// takes back. Real etcd streams its bolt database followed by the SHA-256 of
// the bytes before it, so a truncated or altered snapshot is caught on
// restore; the emulator keeps that shape with a format small enough to read:
//
//	snapshotMagic                         "rezus-emulated-etcd-snapshot/v1\n"
//	one line of JSON, then "\n"           {"cluster":"…","revision":N,"keys":{"k":"v",…},"padding":P}
//	                                      (spaces before the "\n" align the hash, see snapshotMeta)
//	P bytes of filler                     byte i is i mod 251: deterministic, never held whole
//	32 bytes                              SHA-256 of everything above
//
// The JSON is encoding/json's (map keys sorted), so one etcd state always
// gives the same bytes. cluster is informational: a snapshot may be
// restored into another cluster, as with real etcd.
const snapshotMagic = "rezus-emulated-etcd-snapshot/v1\n"

// Bounds on what a snapshot may hold. The keyspace lives in memory, so it is
// small; padding stands for a large database and is never held.
const (
	// maxKeyspaceBytes bounds the keys and values of a cluster (keyspaceBytes).
	maxKeyspaceBytes = 8 << 20
	// maxSnapshotMeta bounds the JSON line of a snapshot: the keyspace with
	// JSON's escaping (at most 6 bytes per byte).
	maxSnapshotMeta = 64 << 20
	// maxPadding is etcd's largest recommended backend quota (8 GiB).
	maxPadding = 8 << 30
	// snapshotChunk is the size of the common.Data messages a snapshot is streamed in.
	snapshotChunk = 1 << 20
)

// etcdState is one cluster's etcd data: its keys and store revision (1 after
// bootstrap, +1 per write), and padding, filler bytes a snapshot carries to
// stand for a large database. A stored etcdState is never modified: a write
// replaces it, so a snapshot can stream one without a lock.
type etcdState struct {
	Cluster  string            `json:"cluster"`
	Revision int64             `json:"revision"`
	Keys     map[string]string `json:"keys"`
	Padding  int64             `json:"padding,omitempty"`
}

// keyOverhead is what each key costs beyond its bytes, so that many tiny
// keys are bounded too: with it, the JSON of a full keyspace (at most 6
// bytes per byte escaped, 6 more per key) stays under maxSnapshotMeta.
const keyOverhead = 16

// keyspaceBytes is the summed length of the keys and values, with keyOverhead per key.
func (s *etcdState) keyspaceBytes() int {
	n := 0
	for k, v := range s.Keys {
		n += len(k) + len(v) + keyOverhead
	}
	return n
}

// snapshotSize is the length of the snapshot of s, or an error if s cannot be encoded.
func (s *etcdState) snapshotSize() (int64, error) {
	meta, err := snapshotMeta(s)
	if err != nil {
		return 0, err
	}
	return int64(len(snapshotMagic)+len(meta)) + s.Padding + sha256.Size, nil
}

func snapshotMeta(s *etcdState) ([]byte, error) {
	keys := s.Keys
	if keys == nil {
		keys = map[string]string{}
	}
	meta, err := json.Marshal(etcdState{Cluster: s.Cluster, Revision: s.Revision, Keys: keys, Padding: s.Padding})
	if err != nil {
		return nil, fmt.Errorf("encoding the etcd snapshot: %w", err)
	}
	// Spaces after the JSON make everything before the hash a whole number
	// of 512-byte blocks, as a bolt database is: clients such as talosctl
	// check that a snapshot's size is 32 more than a multiple of 512.
	used := (int64(len(snapshotMagic)+len(meta)+1) + s.Padding) % snapshotBlock
	meta = append(meta, bytes.Repeat([]byte{' '}, int((snapshotBlock-used)%snapshotBlock))...)
	return append(meta, '\n'), nil
}

// snapshotBlock is what a snapshot's size before its hash is a multiple of.
const snapshotBlock = 512

// The padding filler repeats a pattern whose period, 251, is prime, so it
// does not line up with a chunk or message boundary. fillerBlock holds whole
// periods, so any run of up to maxFillerRun bytes from any offset is one
// slice of it: nothing is generated per byte, and nothing is held whole.
const fillerPeriod = 251

var fillerBlock = func() []byte {
	b := make([]byte, fillerPeriod*256)
	for i := range b {
		b[i] = byte(i % fillerPeriod)
	}
	return b
}()

// maxFillerRun is the longest run fillerAt serves.
var maxFillerRun = int64(len(fillerBlock) - fillerPeriod)

// fillerAt is the n padding bytes from offset off; n ≤ maxFillerRun.
func fillerAt(off, n int64) []byte {
	start := off % fillerPeriod
	return fillerBlock[start : start+n]
}

// writeSnapshot writes the snapshot of s to w.
func writeSnapshot(w io.Writer, s *etcdState) error {
	meta, err := snapshotMeta(s)
	if err != nil {
		return err
	}
	h := sha256.New()
	mw := io.MultiWriter(w, h)
	if _, err := io.WriteString(mw, snapshotMagic); err != nil {
		return err
	}
	if _, err := mw.Write(meta); err != nil {
		return err
	}
	for off := int64(0); off < s.Padding; {
		n := min(maxFillerRun, s.Padding-off)
		if _, err := mw.Write(fillerAt(off, n)); err != nil {
			return err
		}
		off += n
	}
	_, err = w.Write(h.Sum(nil))
	return err
}

// errSnapshot marks a snapshot that is malformed, truncated or altered.
var errSnapshot = errors.New("invalid etcd snapshot")

func snapshotErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errSnapshot, fmt.Sprintf(format, args...))
}

// readSnapshot reads and checks a snapshot from r, reading no further than
// its end (a snapshot followed by more bytes is refused). The padding is
// hashed as it streams past, never held. Errors wrap errSnapshot when the
// bytes are at fault, else they are r's.
func readSnapshot(r io.Reader) (*etcdState, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	h := sha256.New()
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil {
		return nil, shortRead(err, "the header")
	}
	if string(magic) != snapshotMagic {
		return nil, snapshotErrorf("not an emulated etcd snapshot (header %q)", magic)
	}
	h.Write(magic)
	meta, err := readLine(br, h, maxSnapshotMeta)
	if err != nil {
		return nil, err
	}
	var s etcdState
	dec := json.NewDecoder(bytes.NewReader(meta))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, snapshotErrorf("decoding its header: %v", err)
	}
	if s.Revision < 1 {
		return nil, snapshotErrorf("revision %d is not positive", s.Revision)
	}
	if s.Padding < 0 || s.Padding > maxPadding {
		return nil, snapshotErrorf("padding %d is out of range [0, %d]", s.Padding, int64(maxPadding))
	}
	if s.Keys == nil {
		s.Keys = map[string]string{}
	}
	if n := s.keyspaceBytes(); n > maxKeyspaceBytes {
		return nil, snapshotErrorf("its keyspace (%d bytes) exceeds the emulator's %d", n, maxKeyspaceBytes)
	}
	if _, ok := s.Keys[""]; ok {
		return nil, snapshotErrorf("it holds an empty key")
	}
	if err := checkPadding(br, h, s.Padding); err != nil {
		return nil, err
	}
	sum := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, sum); err != nil {
		return nil, shortRead(err, "the checksum")
	}
	if !bytes.Equal(sum, h.Sum(nil)) {
		return nil, snapshotErrorf("sha256 mismatch: the snapshot is truncated or altered")
	}
	if _, err := br.ReadByte(); err == nil {
		return nil, snapshotErrorf("bytes after the checksum")
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	return &s, nil
}

// readLine reads the JSON line (without its "\n") into h, refusing one longer than limit.
func readLine(br *bufio.Reader, h hash.Hash, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > limit+1 {
			return nil, snapshotErrorf("its header is longer than %d bytes", limit)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			h.Write(line)
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, shortRead(err, "the header")
		}
	}
}

// checkPadding reads n padding bytes into h and checks they are the filler.
func checkPadding(br *bufio.Reader, h hash.Hash, n int64) error {
	buf := make([]byte, 32<<10)
	for off := int64(0); off < n; {
		m := min(int64(len(buf)), n-off)
		if _, err := io.ReadFull(br, buf[:m]); err != nil {
			return shortRead(err, "the padding")
		}
		h.Write(buf[:m])
		if !bytes.Equal(buf[:m], fillerAt(off, m)) {
			return snapshotErrorf("the padding at offset %d is altered", off)
		}
		off += m
	}
	return nil
}

// shortRead turns an early end of the stream into a truncation error.
func shortRead(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return snapshotErrorf("truncated in %s", what)
	}
	return err
}

// validText reports why a key or value cannot be kept (the snapshot is JSON,
// so both must be UTF-8), or "" if it can.
func validText(what, s string) string {
	if !utf8.ValidString(s) {
		return what + " is not valid UTF-8"
	}
	return ""
}
