package backup

import (
	"io"
	"os"

	"github.com/rezuscloud/rezuscloud/talos/etcdsnapshot"
)

// A snapshot's revision is in its bolt database's key bucket (the last
// revision key) or meta bucket (the last compaction), pages that can be
// anywhere in the file: it is read once the snapshot is whole. The
// snapshot is copied to a file as it streams past, so memory stays bounded
// whatever its size. The revision is informational (a backup's status, the
// check after a restore): a copy that fails leaves it unknown, never the
// backup failed.

// spoolFile copies what is written to it into a temporary file. A write
// that fails is remembered and the rest ignored, so the stream it tees goes on.
type spoolFile struct {
	f   *os.File
	err error
}

func newSpoolFile(dir string) *spoolFile {
	f, err := os.CreateTemp(dir, "etcd-backup-*.db")
	return &spoolFile{f: f, err: err}
}

func (s *spoolFile) Write(p []byte) (int, error) {
	if s.err == nil {
		_, s.err = s.f.Write(p)
	}
	return len(p), nil
}

// revision reads the revision etcd restores from the copied snapshot (ok
// false when the copy failed or is not an etcd database) and removes the file.
func (s *spoolFile) revision() (int64, bool) {
	if s.f == nil {
		return 0, false
	}
	defer os.Remove(s.f.Name())
	if err := s.f.Close(); err != nil || s.err != nil {
		return 0, false
	}
	info, err := etcdsnapshot.ReadInfo(s.f.Name())
	return info.Revision, err == nil
}

// discard removes the file without reading it.
func (s *spoolFile) discard() {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
	}
}

// snapshotRevision reads the revision of the whole snapshot read from r
// (spooled to a file in dir, its SHA-256 checked), for a check after a
// restore.
func snapshotRevision(r io.Reader, dir string) (int64, error) {
	path, err := etcdsnapshot.Spool(r, dir, 0)
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	info, err := etcdsnapshot.ReadInfo(path)
	return info.Revision, err
}
