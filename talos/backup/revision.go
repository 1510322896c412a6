package backup

import (
	"bytes"
	"regexp"
	"strconv"
)

// emulatedSnapshotMagic starts a snapshot of the Talos node emulator, whose
// second line is JSON beginning {"cluster":"…","revision":N (see
// talos/emulator/etcd_snapshot.go). A real etcd snapshot is a bolt
// database: its revision is not read from it.
const emulatedSnapshotMagic = "rezus-emulated-etcd-snapshot/v1\n"

// sniffBytes is how much of a snapshot's start is kept to find its revision.
const sniffBytes = 4096

var emulatedRevision = regexp.MustCompile(`^\{"cluster":"(?:[^"\\]|\\.)*","revision":(\d+)[,}]`)

// snapshotRevision reads etcd's revision from the start of a snapshot,
// when its format shows it.
func snapshotRevision(head []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(head, []byte(emulatedSnapshotMagic))
	if !ok {
		return 0, false
	}
	m := emulatedRevision.FindSubmatch(rest)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(m[1]), 10, 64)
	return n, err == nil
}

// sniffer keeps the first sniffBytes written to it.
type sniffer struct{ head []byte }

func (s *sniffer) Write(p []byte) (int, error) {
	if room := sniffBytes - len(s.head); room > 0 {
		s.head = append(s.head, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
