package emulator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/rezuscloud/rezuscloud/domain"
)

// kindNode names emulated nodes in errors.
const kindNode = "EmulatedNode"

// Emulator owns emulated nodes: their addresses, the etcd membership their
// control planes share, their faults and their persisted state.
type Emulator struct {
	cfg   Config
	ready chan struct{}
	// token is the HTTP API's bearer token (apitoken.go).
	token string

	// osCAs maps an osCAKey to an OS CA with key, learnt from control-plane
	// configs; a sync.Map so nodes read it under their own lock.
	osCAs sync.Map

	mu        sync.Mutex
	nodes     map[string]*node
	addresses map[string]*reservation
	loopback  bool
	running   bool
	// scanFrom is where this emulator starts looking for a free loopback IP.
	scanFrom int
	// etcd holds each bootstrapped cluster's etcd data by cluster id; a
	// stored etcdState is replaced, never modified (etcd_data.go).
	etcd map[string]*etcdState
	// schematics is the Image Factory catalogue by ID (schematics.go).
	schematics map[string]domain.Schematic
	// maxNodes, when above zero, is how many nodes the emulator holds at
	// most: a create beyond it fails as a cloud out of capacity does
	// (SetCapacity; not persisted).
	maxNodes int
	// closed is set once Run is stopping: nothing more is persisted.
	closed bool

	// writes counts state writes in flight, so Run returns only after the
	// last one: nothing touches StateDir once Run has returned.
	writes sync.WaitGroup

	// kube runs the real Kubernetes parts of the nodes (Config.Kube); nil
	// in light mode.
	kube *kubeSupervisor
}

// New checks cfg and returns an emulator; Run starts it.
func New(cfg Config) (*Emulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("emulator config: %w", err)
	}
	cfg = cfg.withDefaults()
	token, err := apiToken(cfg)
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	e := &Emulator{cfg: cfg, token: token, ready: make(chan struct{}), nodes: map[string]*node{}, addresses: map[string]*reservation{},
		etcd: map[string]*etcdState{}, scanFrom: loopbackScanStart(cfg.StateDir)}
	if cfg.Kube != nil {
		dir := filepath.Join(cfg.StateDir, "kube")
		if cfg.StateDir == "" {
			tmp, err := os.MkdirTemp("", "emulator-kube-")
			if err != nil {
				return nil, err
			}
			dir = tmp
		}
		e.kube = newKubeSupervisor(e, *cfg.Kube, dir)
	}
	return e, nil
}

// Ready is closed once Run has restored the persisted nodes and Create works.
func (e *Emulator) Ready() <-chan struct{} { return e.ready }

// Loopback reports whether nodes get their own loopback IPs (else a port each).
func (e *Emulator) Loopback() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loopback
}

// Run restores the nodes and address reservations persisted in
// Config.StateDir, serves until ctx ends, then stops every node (their state
// stays on disk).
func (e *Emulator) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return errors.New("emulator is already running")
	}
	e.running = true
	e.loopback = e.chooseLoopback()
	e.mu.Unlock()
	if err := e.restore(); err != nil {
		return err
	}
	kubeDone := make(chan struct{})
	if e.kube != nil {
		if e.cfg.StateDir == "" {
			defer os.RemoveAll(e.kube.dir)
		}
		go func() {
			defer close(kubeDone)
			e.kube.run(ctx)
		}()
	} else {
		close(kubeDone)
	}
	close(e.ready)
	<-ctx.Done()
	// The Kubernetes parts stop first, with their nodes still up: kubelets
	// report NotReady, etcd and the API servers exit; their data stays.
	<-kubeDone
	e.mu.Lock()
	nodes := make([]*node, 0, len(e.nodes))
	for _, n := range e.nodes {
		nodes = append(nodes, n)
	}
	e.mu.Unlock()
	for _, n := range nodes {
		n.shutdown(false)
	}
	e.closeReservations()
	// A stopped node writes no more (persist checks stopped under its lock),
	// nor does a closed emulator's etcd data (persistEtcd checks closed).
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.writes.Wait()
	return nil
}

// chooseLoopback decides the addressing mode: loopback IPs if asked for or,
// in auto mode, if a second loopback IP can be bound here.
func (e *Emulator) chooseLoopback() bool {
	switch e.cfg.Addressing {
	case AddressingLoopback:
		return true
	case AddressingPorts:
		return false
	}
	l, err := net.Listen("tcp", "127.0.1.254:0")
	if err != nil {
		e.cfg.Logf("loopback addressing unavailable (%v); using a port per node", err)
		return false
	}
	l.Close()
	return true
}

// listen binds a new node's address: the reserved address it asks for, else
// the first free 127.0.N.M:Port in loopback mode (skipping reserved addresses
// and addresses another process holds), else a fresh port on Config.Host.
// Caller holds e.mu.
func (e *Emulator) listen(spec NodeSpec) (net.Listener, error) {
	switch {
	case spec.Address != "":
		return e.reservedListenerLocked(spec.Name, spec.Address)
	case e.loopback:
		return e.listenLoopbackLocked()
	default:
		return net.Listen("tcp", net.JoinHostPort(e.cfg.Host, "0"))
	}
}

// Create boots a node, in maintenance mode unless spec.UserData holds a
// config, on spec.Address if set (a reserved address no other node is on).
func (e *Emulator) Create(ctx context.Context, spec NodeSpec) (NodeStatus, error) {
	select {
	case <-e.ready:
	case <-ctx.Done():
		return NodeStatus{}, ctx.Err()
	}
	causes := domain.ValidateName(spec.Name, "name")
	if spec.Address != "" && net.ParseIP(spec.Address).To4() == nil {
		causes = append(causes, domain.Cause{Field: "address", Type: domain.CauseInvalid, Message: fmt.Sprintf("%q is not an IPv4 address", spec.Address)})
	}
	if causes != nil {
		return NodeStatus{}, domain.NewInvalid(kindNode, spec.Name, causes)
	}
	var n *node
	e.mu.Lock()
	if _, ok := e.nodes[spec.Name]; ok {
		e.mu.Unlock()
		return NodeStatus{}, domain.NewAlreadyExists(kindNode, spec.Name)
	}
	if e.maxNodes > 0 && len(e.nodes) >= e.maxNodes {
		e.mu.Unlock()
		return NodeStatus{}, domain.NewForbidden(kindNode, spec.Name,
			fmt.Sprintf("insufficient capacity: the emulator holds its maximum of %d nodes (PUT /v1/capacity)", e.maxNodes))
	}
	n = &node{em: e, st: NodeStatus{Name: spec.Name, Cluster: spec.Cluster, Version: e.cfg.TalosVersion}}
	if len(spec.UserData) > 0 {
		cfg, err := loadConfig(spec.UserData)
		if err != nil {
			e.mu.Unlock()
			return NodeStatus{}, domain.NewInvalid(kindNode, spec.Name, []domain.Cause{{Field: "userData", Type: domain.CauseInvalid, Message: err.Error()}})
		}
		n.setConfigLocked(spec.UserData, cfg)
	}
	lis, err := e.listen(spec)
	if err != nil {
		e.mu.Unlock()
		var derr *domain.Error
		if errors.As(err, &derr) {
			return NodeStatus{}, err
		}
		return NodeStatus{}, fmt.Errorf("creating node %s: %w", spec.Name, err)
	}
	e.nodes[spec.Name] = n
	n.mu.Lock()
	n.gen++
	n.bindLocked(lis)
	err = n.startLocked()
	n.mu.Unlock()
	e.mu.Unlock()
	if err != nil {
		return NodeStatus{}, fmt.Errorf("creating node %s: %w", spec.Name, err)
	}
	e.persist(n)
	return n.status(), nil
}

// Capacity is how many nodes the emulator holds at most; MaxNodes 0 is no
// limit.
type Capacity struct {
	MaxNodes int `json:"maxNodes"`
}

// SetCapacity limits the nodes the emulator holds, so tests can make a
// provider run out of capacity: a create beyond the limit fails with 403
// "insufficient capacity" (nodes already running stay). It lasts until the
// emulator stops.
func (e *Emulator) SetCapacity(c Capacity) (Capacity, error) {
	if c.MaxNodes < 0 {
		return Capacity{}, domain.NewInvalid("Capacity", "", []domain.Cause{{Field: "maxNodes", Type: domain.CauseInvalid, Message: "must be 0 (no limit) or more"}})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.maxNodes = c.MaxNodes
	return c, nil
}

// GetCapacity is the limit SetCapacity set.
func (e *Emulator) GetCapacity() Capacity {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Capacity{MaxNodes: e.maxNodes}
}

// bootOnlyPhaseLocked sets the phase of a node whose server was just started
// by Create or restore, and schedules services.
func (n *node) bootOnlyPhaseLocked() {
	gen := n.gen
	if n.cfg == nil {
		n.st.Phase = PhaseMaintenance
		n.logf("booted into maintenance mode, talos %s", n.st.Version)
		return
	}
	n.st.Phase = PhaseBooting
	n.logf("booted talos %s, starting services", n.st.Version)
	n.bootingEventsLocked()
	n.em.refreshCOSI(n)
	n.em.cfg.AfterFunc(n.em.cfg.ServiceStartDelay, func() {
		n.mu.Lock()
		running := n.gen == gen && n.st.Phase == PhaseBooting
		if running {
			n.st.Phase = PhaseRunning
			n.boot.running = n.em.cfg.Now()
			n.logf("services running")
			n.runningEventsLocked()
		}
		n.mu.Unlock()
		if running {
			n.em.refreshCOSI(n)
			n.em.kube.pokeAll()
		}
	})
}

// List returns every node, sorted by name.
func (e *Emulator) List() []NodeStatus {
	e.mu.Lock()
	nodes := make([]*node, 0, len(e.nodes))
	for _, n := range e.nodes {
		nodes = append(nodes, n)
	}
	e.mu.Unlock()
	out := make([]NodeStatus, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns one node.
func (e *Emulator) Get(name string) (NodeStatus, error) {
	n, err := e.node(name)
	if err != nil {
		return NodeStatus{}, err
	}
	return n.status(), nil
}

func (e *Emulator) node(name string) (*node, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n, ok := e.nodes[name]
	if !ok {
		return nil, domain.NewNotFound(kindNode, name)
	}
	return n, nil
}

// Delete stops a node and forgets it (and its persisted state). A reserved
// address it was on stays reserved, free for another node.
func (e *Emulator) Delete(name string) error {
	e.mu.Lock()
	n, ok := e.nodes[name]
	var heir *node
	if ok {
		delete(e.nodes, name)
		// The machine is gone from etcd with it (a simplification: real etcd
		// keeps a dead member until it is removed).
		heir = e.handOverBootstrapLocked(n)
	}
	e.mu.Unlock()
	if !ok {
		return domain.NewNotFound(kindNode, name)
	}
	if heir != nil {
		e.persist(heir)
	}
	n.shutdown(true)
	e.releaseNodeAddress(name, n.status().Address)
	// The rest of its cluster no longer lists it as a member (nor, for a
	// control plane, in etcd).
	if st := n.status(); st.ClusterID != "" {
		for _, m := range e.clusterNodes(n, st.ClusterID)[1:] {
			if st.Role == "controlplane" && m.status().Role == "controlplane" {
				m.syncCOSI()
			} else {
				m.syncMember(n) // n is no longer in e.nodes: its member goes
			}
		}
	}
	if e.cfg.StateDir != "" {
		dir := filepath.Join(e.cfg.StateDir, "nodes")
		for _, f := range []string{name + ".json", name + configSuffix, name + stagedSuffix, name + uploadSuffix} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("deleting node %s: %w", name, err)
			}
		}
	}
	return nil
}

// InjectFault replaces a node's faults with f; the zero Faults heals it.
func (e *Emulator) InjectFault(name string, f Faults) (NodeStatus, error) {
	n, err := e.node(name)
	if err != nil {
		return NodeStatus{}, err
	}
	n.setFaults(f)
	return n.status(), nil
}

// controlPlanesLocked returns the configured control planes of a cluster. Caller holds e.mu.
func (e *Emulator) controlPlanesLocked(clusterID string) []*node {
	var out []*node
	for _, n := range e.nodes {
		n.mu.Lock()
		if clusterID != "" && n.st.ClusterID == clusterID && n.st.Role == "controlplane" {
			out = append(out, n)
		}
		n.mu.Unlock()
	}
	return out
}
