//go:build unix

package eventstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrDataDirInUse is returned when another process runs an embedded server
// on the same data dir.
var ErrDataDirInUse = errors.New("the data dir is in use by a running rezuscloud server")

// lockDataDir takes an exclusive lock on <dir>/nats.lock for as long as the
// embedded server runs, so that a second server, an offline backup or a
// rebuild never opens the JetStream files under a running one. The kernel
// drops the lock when the process ends, even by kill -9.
func lockDataDir(dir string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "nats.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrDataDirInUse, dir)
		}
		return nil, fmt.Errorf("locking the data dir: %w", err)
	}
	return func() { f.Close() }, nil
}
