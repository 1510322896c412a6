package eventstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// sealKeySize is the length of a sealing key file's content: an AES-256 key.
const sealKeySize = 32

// loadSealKey reads the key file, first moving the key from cfg.MoveKeyFrom
// there when the key file does not exist yet, and creates the key file when
// neither exists.
func loadSealKey(cfg SealerConfig) ([]byte, error) {
	if cfg.KeyFile == "" {
		return nil, errors.New("a secrets passphrase or a key file is required")
	}
	if cfg.MoveKeyFrom != "" && filepath.Clean(cfg.MoveKeyFrom) != filepath.Clean(cfg.KeyFile) {
		if err := moveSealKey(cfg.MoveKeyFrom, cfg.KeyFile); err != nil {
			return nil, err
		}
	}
	return loadOrCreateKeyFile(cfg.KeyFile)
}

// readKeyFile reads a key file, refusing one that others may read or that
// does not hold a key. It answers fs.ErrNotExist (wrapped) when it is missing.
func readKeyFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading key file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&^0o600 != 0 {
		return nil, fmt.Errorf("key file %s has mode %04o, which lets others than its owner read or run it; make it 0600 (chmod 600 %s)", path, perm, path)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading key file %s: %w", path, err)
	}
	if len(key) != sealKeySize {
		return nil, fmt.Errorf("key file %s holds %d bytes, want a %d-byte key", path, len(key), sealKeySize)
	}
	return key, nil
}

func loadOrCreateKeyFile(path string) ([]byte, error) {
	key, err := readKeyFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if key, err = random(sealKeySize); err != nil {
		return nil, err
	}
	created, err := createKeyFile(path, key)
	if err != nil {
		return nil, err
	}
	if !created {
		return readKeyFile(path) // another process won the race
	}
	return key, nil
}

// createKeyFile writes key to a new file with mode 0600 and syncs it; it
// reports false when the file already exists.
func createKeyFile(path string, key []byte) (bool, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, fmt.Errorf("creating key file dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating key file: %w", err)
	}
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return false, fmt.Errorf("writing key file %s: %w", path, err)
	}
	return true, nil
}

// moveSealKey moves the key in from (the data dir's, written before the key
// could live elsewhere) to the key file to, so the data dir no longer carries
// its own key. It copies rather than renames, since the two are usually on
// different file systems, and removes from only once to holds the key on
// disk. A key file that already holds the same key finishes an interrupted
// move; one holding another key is refused, since only one of them opens the
// secrets.
func moveSealKey(from, to string) error {
	old, err := readKeyFile(from)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("moving the sealing key: %w", err)
	}
	created, err := createKeyFile(to, old)
	if err != nil {
		return fmt.Errorf("moving the sealing key from %s: %w", from, err)
	}
	if !created {
		cur, err := readKeyFile(to)
		if err != nil {
			return err
		}
		if !bytes.Equal(cur, old) {
			return fmt.Errorf("both %s and %s hold a sealing key and they differ; the secrets were sealed with the one in %s unless you moved it yourself: keep the right one and delete the other", from, to, from)
		}
	}
	if err := syncDir(filepath.Dir(to)); err != nil {
		return err
	}
	if err := os.Remove(from); err != nil {
		return fmt.Errorf("removing the moved sealing key %s: %w", from, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
