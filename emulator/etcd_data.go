package emulator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// A cluster's etcd data lives beside its membership: the keys and revision
// are the cluster's, not a node's, and exist while the cluster is
// bootstrapped. Bootstrap starts them at revision 1 with no keys; a
// bootstrap with recover_etcd starts them from an uploaded snapshot; a wipe
// (a disaster) drops them and the bootstrap, so the control planes wait for
// bootstrap again, as real Talos nodes whose etcd data is gone do.

// Kinds named in errors of the etcd data API.
const (
	kindEtcd    = "EtcdCluster"
	kindEtcdKey = "EtcdKey"
)

// Bounds on one write, following etcd's defaults.
const (
	// maxEtcdValue is etcd's default --max-request-bytes (1.5 MiB).
	maxEtcdValue = 3 << 19
	// maxEtcdKey bounds a key's length.
	maxEtcdKey = 4 << 10
)

// EtcdData is a cluster's etcd as the HTTP API shows it.
type EtcdData struct {
	// Cluster is the cluster's id, the clusterID of its nodes' status
	// (cluster.id of their machine config, else cluster.clusterName).
	Cluster string `json:"cluster"`
	// Bootstrapped is false before bootstrap and after a wipe until a
	// recovery; etcd then holds nothing (revision 0, no keys).
	Bootstrapped bool `json:"bootstrapped"`
	// Revision is etcd's store revision: 1 after bootstrap, +1 per write.
	Revision int64 `json:"revision"`
	// Keys are the keys and their values.
	Keys map[string]string `json:"keys"`
	// Padding is how many filler bytes a snapshot carries beyond the keys.
	Padding int64 `json:"padding,omitempty"`
	// SnapshotSize is the length of the snapshot EtcdSnapshot streams now.
	SnapshotSize int64 `json:"snapshotSize,omitempty"`
}

// freshEtcd is a cluster's etcd just after bootstrap.
func freshEtcd(clusterID string) *etcdState {
	return &etcdState{Cluster: clusterID, Revision: 1, Keys: map[string]string{}, Revs: map[string]keyRevs{}}
}

// etcdStateLocked returns the cluster's etcd data; ok is false when the
// cluster is not bootstrapped. A bootstrapped cluster with no data yet (one
// persisted before the emulator kept data) starts fresh. Caller holds e.mu.
func (e *Emulator) etcdStateLocked(clusterID string) (s *etcdState, ok bool) {
	if !e.etcdLocked(clusterID).bootstrapped {
		return nil, false
	}
	if s = e.etcd[clusterID]; s == nil {
		s = freshEtcd(clusterID)
		e.etcd[clusterID] = s
	}
	return s, true
}

// knownClusterLocked reports whether a configured control plane names the
// cluster; the etcd API answers NotFound for any other. Caller holds e.mu.
func (e *Emulator) knownClusterLocked(clusterID string) bool {
	return len(e.controlPlanesLocked(clusterID)) > 0
}

// EtcdData reads a cluster's etcd.
func (e *Emulator) EtcdData(clusterID string) (EtcdData, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.knownClusterLocked(clusterID) {
		return EtcdData{}, domain.NewNotFound(kindEtcd, clusterID)
	}
	s, ok := e.etcdStateLocked(clusterID)
	if !ok {
		return EtcdData{Cluster: clusterID, Keys: map[string]string{}}, nil
	}
	return s.view()
}

func (s *etcdState) view() (EtcdData, error) {
	size, err := s.snapshotSize()
	if err != nil {
		return EtcdData{}, err
	}
	return EtcdData{Cluster: s.Cluster, Bootstrapped: true, Revision: s.Revision,
		Keys: maps.Clone(s.Keys), Padding: s.Padding, SnapshotSize: size}, nil
}

// updateEtcd replaces a bootstrapped cluster's etcd data with what change
// makes of it (a copy), persists it and returns the new view.
func (e *Emulator) updateEtcd(clusterID string, change func(s *etcdState) error) (EtcdData, error) {
	e.mu.Lock()
	if !e.knownClusterLocked(clusterID) {
		e.mu.Unlock()
		return EtcdData{}, domain.NewNotFound(kindEtcd, clusterID)
	}
	old, ok := e.etcdStateLocked(clusterID)
	if !ok {
		e.mu.Unlock()
		return EtcdData{}, domain.NewConflict(kindEtcd, clusterID, "etcd is not running: the cluster is not bootstrapped (or its etcd was wiped and not recovered)")
	}
	s := *old
	s.Keys = maps.Clone(old.Keys)
	s.Revs = maps.Clone(old.Revs)
	if s.Revs == nil {
		s.Revs = map[string]keyRevs{}
	}
	if err := change(&s); err != nil {
		e.mu.Unlock()
		return EtcdData{}, err
	}
	e.etcd[clusterID] = &s
	v, err := s.view()
	e.mu.Unlock()
	e.persistEtcd(clusterID)
	return v, err
}

// PutEtcdKey writes a key, as an API server would: the revision goes up by one.
func (e *Emulator) PutEtcdKey(clusterID, key, value string) (EtcdData, error) {
	var causes []domain.Cause
	switch {
	case key == "":
		causes = append(causes, domain.Cause{Field: "key", Type: domain.CauseRequired, Message: "a key is required"})
	case len(key) > maxEtcdKey:
		causes = append(causes, domain.Cause{Field: "key", Type: domain.CauseInvalid, Message: fmt.Sprintf("longer than %d bytes", maxEtcdKey)})
	case validText("the key", key) != "":
		causes = append(causes, domain.Cause{Field: "key", Type: domain.CauseInvalid, Message: validText("the key", key)})
	}
	switch {
	case len(value) > maxEtcdValue:
		causes = append(causes, domain.Cause{Field: "value", Type: domain.CauseInvalid, Message: fmt.Sprintf("longer than etcd's request limit of %d bytes", maxEtcdValue)})
	case validText("the value", value) != "":
		causes = append(causes, domain.Cause{Field: "value", Type: domain.CauseInvalid, Message: validText("the value", value)})
	}
	if causes != nil {
		return EtcdData{}, domain.NewInvalid(kindEtcdKey, key, causes)
	}
	return e.updateEtcd(clusterID, func(s *etcdState) error {
		s.put(key, value)
		if s.keyspaceBytes() > maxKeyspaceBytes {
			return domain.NewForbidden(kindEtcd, clusterID, fmt.Sprintf("the keyspace would exceed the emulator's %d bytes", maxKeyspaceBytes))
		}
		return nil
	})
}

// DeleteEtcdKey deletes a key (the revision goes up by one); NotFound if it is not there.
func (e *Emulator) DeleteEtcdKey(clusterID, key string) (EtcdData, error) {
	return e.updateEtcd(clusterID, func(s *etcdState) error {
		if _, ok := s.Keys[key]; !ok {
			return domain.NewNotFound(kindEtcdKey, key)
		}
		s.del(key)
		return nil
	})
}

// SetEtcdPadding makes the cluster's snapshots carry n bytes of filler
// (generated as they stream, never held), to test large snapshots. It is
// not a write: the revision stays.
func (e *Emulator) SetEtcdPadding(clusterID string, n int64) (EtcdData, error) {
	if n < 0 || n > maxPadding {
		return EtcdData{}, domain.NewInvalid(kindEtcd, clusterID, []domain.Cause{{
			Field: "bytes", Type: domain.CauseInvalid, Message: fmt.Sprintf("must be between 0 and %d", int64(maxPadding)),
		}})
	}
	return e.updateEtcd(clusterID, func(s *etcdState) error {
		s.Padding = n
		return nil
	})
}

// WipeEtcd is a disaster: every control plane of the cluster loses its etcd
// data. The cluster is no longer bootstrapped, so its members answer etcd
// calls with FailedPrecondition and report etcd waiting for bootstrap, until
// a bootstrap (with recover_etcd, from an uploaded snapshot) brings it back.
// Snapshots uploaded with EtcdRecover survive it (Talos keeps them beside
// the etcd data, not in it).
func (e *Emulator) WipeEtcd(clusterID string) error {
	e.mu.Lock()
	cps := e.controlPlanesLocked(clusterID)
	if len(cps) == 0 {
		e.mu.Unlock()
		return domain.NewNotFound(kindEtcd, clusterID)
	}
	var touched []*node
	for _, n := range cps {
		n.mu.Lock()
		if n.st.Bootstrapped {
			n.st.Bootstrapped = false
			touched = append(touched, n)
		}
		n.logf("etcd data lost (emulated disaster)")
		n.mu.Unlock()
	}
	delete(e.etcd, clusterID)
	e.mu.Unlock()
	for _, n := range touched {
		e.persist(n)
	}
	e.persistEtcd(clusterID)
	return nil
}

// etcdDir holds one file per cluster's etcd data: a bolt database laid
// out as its snapshots are (without their free pages).
const etcdDir = "etcd"

// etcdFile names a cluster's file by a hash of its id, which may hold any
// character; the id itself is inside.
func etcdFile(stateDir, clusterID string) string {
	sum := sha256.Sum256([]byte(clusterID))
	return filepath.Join(stateDir, etcdDir, hex.EncodeToString(sum[:16])+".db")
}

// persistEtcd writes a cluster's etcd data, or removes its file when it has
// none; errors are logged, as for nodes.
func (e *Emulator) persistEtcd(clusterID string) {
	if e.cfg.StateDir == "" {
		return
	}
	persistMu.Lock()
	defer persistMu.Unlock()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	s := e.etcd[clusterID] // never modified once stored: safe to read unlocked
	e.writes.Add(1)
	e.mu.Unlock()
	defer e.writes.Done()
	if err := writeEtcdFile(etcdFile(e.cfg.StateDir, clusterID), s); err != nil {
		e.cfg.Logf("persisting the etcd data of cluster %s: %v", clusterID, err)
	}
}

func writeEtcdFile(path string, s *etcdState) error {
	if s == nil {
		return writeOrRemove(path, nil)
	}
	b, err := encodeEtcd(s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeAtomic(path, b)
}

// restoreEtcdLocked loads the clusters' etcd data. Caller holds e.mu.
func (e *Emulator) restoreEtcdLocked() error {
	dir := filepath.Join(e.cfg.StateDir, etcdDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading emulator etcd data: %w", err)
	}
	for _, ent := range entries {
		if !strings.HasSuffix(ent.Name(), ".db") {
			continue
		}
		s, err := readEtcdFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			return fmt.Errorf("reading etcd data %s: %w", ent.Name(), err)
		}
		e.etcd[s.Cluster] = s
	}
	return nil
}
