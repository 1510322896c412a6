package talos

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
)

// ErrSnapshotDamaged says an etcd snapshot does not end in the SHA-256 of
// the bytes before it: it was cut short or altered.
var ErrSnapshotDamaged = errors.New("etcd snapshot damaged: it does not end in the sha256 of its content (truncated or altered)")

// SnapshotReader passes an etcd snapshot through unchanged and checks it at
// its end. etcd ends a snapshot (EtcdSnapshot's stream) with the SHA-256 of
// the bytes before it, whatever the database format, so the check needs no
// knowledge of it. It matters because machinery's client ends a snapshot
// stream that was cancelled or hit its deadline with a clean io.EOF: without
// the check a cut-short snapshot reads as a whole one.
type SnapshotReader struct {
	r    io.Reader
	h    hash.Hash
	tail []byte // the last bytes seen, up to sha256.Size, not yet hashed
}

// NewSnapshotReader checks the snapshot read from r: Read answers
// ErrSnapshotDamaged instead of io.EOF when the snapshot does not end in
// the SHA-256 of what precedes it.
func NewSnapshotReader(r io.Reader) *SnapshotReader {
	return &SnapshotReader{r: r, h: sha256.New(), tail: make([]byte, 0, 2*sha256.Size)}
}

func (s *SnapshotReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.see(p[:n])
	if errors.Is(err, io.EOF) && (len(s.tail) < sha256.Size || !bytes.Equal(s.tail, s.h.Sum(nil))) {
		return n, ErrSnapshotDamaged
	}
	return n, err
}

// see hashes all but the last sha256.Size bytes seen so far.
func (s *SnapshotReader) see(b []byte) {
	if len(b) >= sha256.Size {
		s.h.Write(s.tail)
		s.h.Write(b[:len(b)-sha256.Size])
		s.tail = append(s.tail[:0], b[len(b)-sha256.Size:]...)
		return
	}
	s.tail = append(s.tail, b...)
	if extra := len(s.tail) - sha256.Size; extra > 0 {
		s.h.Write(s.tail[:extra])
		s.tail = append(s.tail[:0], s.tail[extra:]...)
	}
}
