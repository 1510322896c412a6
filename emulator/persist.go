package emulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// persisted is a node's JSON file in the state dir (its applied config sits
// beside it in <name>.config.yaml, mode 0600: it holds the cluster's keys).
type persisted struct {
	NodeStatus
}

// persist writes n's status and config; errors are logged, not returned,
// because the node keeps running either way.
func (e *Emulator) persist(n *node) {
	// Every change worth persisting is worth showing in the COSI resources.
	e.refreshCOSI(n)
	if e.cfg.StateDir == "" {
		return
	}
	// The snapshot is taken under persistMu, so writes land in the order
	// their snapshots were taken: a stale snapshot cannot overwrite a newer
	// one (an upgrade's pending reboot was lost that way).
	persistMu.Lock()
	defer persistMu.Unlock()
	n.mu.Lock()
	if n.deleted || n.stopped {
		n.mu.Unlock()
		return
	}
	st, cfg, staged, upload := n.st, n.durableConfigLocked(), n.staged, n.upload
	e.writes.Add(1)
	n.mu.Unlock()
	defer e.writes.Done()
	var uploaded []byte
	if upload != nil {
		b, err := encodeEtcd(upload)
		if err != nil {
			e.cfg.Logf("persisting node %s: %v", st.Name, err)
			return
		}
		uploaded = b
	}
	dir := filepath.Join(e.cfg.StateDir, "nodes")
	if err := writeFiles(dir, st, cfg, staged, uploaded); err != nil {
		e.cfg.Logf("persisting node %s: %v", st.Name, err)
	}
}

var persistMu sync.Mutex // orders snapshots and writes of the state files

// writeFiles writes a node's files; the caller holds persistMu.
func writeFiles(dir string, st NodeStatus, cfg, staged, upload []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(persisted{st}, "", "  ")
	if err != nil {
		return err
	}
	for _, f := range []struct {
		suffix string
		b      []byte
	}{{configSuffix, cfg}, {stagedSuffix, staged}, {uploadSuffix, upload}} {
		if err := writeOrRemove(filepath.Join(dir, st.Name+f.suffix), f.b); err != nil {
			return err
		}
	}
	return writeAtomic(filepath.Join(dir, st.Name+".json"), b)
}

// The files beside a node's JSON: its config, a config staged for its next
// reboot, and an etcd snapshot uploaded for recovery (its decoded content).
const (
	configSuffix = ".config.yaml"
	stagedSuffix = ".staged.yaml"
	uploadSuffix = ".etcd-upload.db"
)

func writeOrRemove(path string, b []byte) error {
	if len(b) > 0 {
		return writeAtomic(path, b)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// restore brings back the address reservations and the nodes of the state
// dir at their addresses. A node caught mid-reboot comes back booted; one
// whose address is taken is kept in PhaseFailed with the reason.
func (e *Emulator) restore() error {
	if e.cfg.StateDir == "" {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.restoreAddressesLocked(); err != nil {
		return err
	}
	if err := e.restoreEtcdLocked(); err != nil {
		return err
	}
	if err := e.restoreSchematicsLocked(); err != nil {
		return err
	}
	dir := filepath.Join(e.cfg.StateDir, "nodes")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading emulator state: %w", err)
	}
	for _, ent := range entries {
		if !strings.HasSuffix(ent.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			return fmt.Errorf("reading emulator state: %w", err)
		}
		var p persisted
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("reading %s: %w", ent.Name(), err)
		}
		n := &node{em: e, st: p.NodeStatus}
		n.st.Error = ""
		if v := n.st.RebootingInto; v != "" {
			// The upgrade's reboot went on while the emulator was down.
			n.st.Version, n.st.Staged, n.st.RebootingInto = v, "", ""
			if img := n.st.RebootingIntoImage; img != "" {
				n.st.Image, n.st.StagedImage, n.st.RebootingIntoImage = img, "", ""
			}
		}
		if err := n.restoreConfigLocked(dir); err != nil {
			return err
		}
		if err := n.restoreUploadLocked(dir); err != nil {
			return err
		}
		e.nodes[p.Name] = n
		n.mu.Lock()
		n.gen++
		if lis := e.adoptReservationLocked(p.Name, n.st.Address); lis != nil {
			n.bindLocked(lis)
		}
		switch {
		case n.st.Faults.Unreachable:
			n.st.Phase = PhaseUnreachable
			if n.lis != nil {
				break
			}
			if lis, err := net.Listen("tcp", n.st.Address); err == nil {
				n.bindLocked(lis)
			}
		case n.startLocked() == nil:
		default:
			e.cfg.Logf("restoring node %s: %s", p.Name, n.st.Error)
		}
		n.mu.Unlock()
	}
	return nil
}

// restoreConfigLocked loads a node's config and staged config. A node that
// was down mid-install or mid-reboot, or had accepted a config in maintenance
// mode, boots the staged config, as that reboot would have.
func (n *node) restoreConfigLocked(dir string) error {
	read := func(suffix string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, n.st.Name+suffix))
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}
	cfgBytes, err := read(configSuffix)
	if err != nil {
		return fmt.Errorf("reading the config of node %s: %w", n.st.Name, err)
	}
	staged, err := read(stagedSuffix)
	if err != nil {
		return fmt.Errorf("reading the staged config of node %s: %w", n.st.Name, err)
	}
	if cfgBytes == nil {
		n.wipeConfigLocked()
	} else {
		cfg, err := loadConfig(cfgBytes)
		if err != nil {
			return fmt.Errorf("loading the config of node %s: %w", n.st.Name, err)
		}
		n.setConfigLocked(cfgBytes, cfg)
	}
	n.staged, n.st.StagedConfigHash = nil, ""
	if staged != nil {
		n.staged, n.st.StagedConfigHash = staged, configHash(staged)
		if cfgBytes == nil || n.st.Phase == PhaseInstalling || n.st.Phase == PhaseRebooting {
			n.rebootConfigLocked()
		}
	}
	return nil
}

// restoreUploadLocked loads the etcd snapshot uploaded to the node, if any.
func (n *node) restoreUploadLocked(dir string) error {
	path := filepath.Join(dir, n.st.Name+uploadSuffix)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	s, err := readEtcdFile(path)
	if err != nil {
		return fmt.Errorf("reading the etcd upload of node %s: %w", n.st.Name, err)
	}
	n.upload = s
	return nil
}
