package emulator

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// NodeSpec is what Create needs to make a node.
type NodeSpec struct {
	// Name is the node's hostname, unique in the emulator (a DNS-1123 label).
	Name string `json:"name"`
	// Cluster is a free-form label grouping nodes (etcd membership is decided
	// by the cluster id in the applied config, not by this label).
	Cluster string `json:"cluster,omitempty"`
	// UserData is a machine config to boot with; empty boots into maintenance mode.
	UserData []byte `json:"userData,omitempty"`
	// Address is a reserved IP (Emulator.ReserveAddress) to boot on; it must
	// not be in use by another node. Empty: the emulator picks a free address.
	Address string `json:"address,omitempty"`
}

// NodeStatus is a node as List reports it and as it is persisted.
type NodeStatus struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster,omitempty"`
	// Address is host:port of the node's Talos API.
	Address string `json:"address"`
	Phase   Phase  `json:"phase"`
	// Version is the Talos version the node reports.
	Version string `json:"version"`
	// Role is "controlplane" or "worker" once configured.
	Role string `json:"role,omitempty"`
	// ClusterID identifies the etcd cluster (cluster.id, else cluster.clusterName).
	ClusterID string `json:"clusterID,omitempty"`
	// Staged is a version installed by LifecycleService.Upgrade that the next
	// reboot boots into.
	Staged string `json:"staged,omitempty"`
	// RebootingInto is the version an upgrade is rebooting the node into. It
	// is persisted so that a node whose emulator process died mid-reboot
	// comes back upgraded, as a real machine would: its reboot does not
	// depend on the management plane that asked for it.
	RebootingInto string `json:"rebootingInto,omitempty"`
	// Image is the installer image the node's Talos was installed from
	// (machine.install.image of its first config, then each upgrade's); its
	// Image Factory schematic decides the extensions it reports.
	Image string `json:"image,omitempty"`
	// StagedImage and RebootingIntoImage are the images of Staged and
	// RebootingInto.
	StagedImage        string `json:"stagedImage,omitempty"`
	RebootingIntoImage string `json:"rebootingIntoImage,omitempty"`
	// ConfigHash is the hex SHA-256 of the exact config bytes the node runs:
	// the last it was given (user data, maintenance-mode or later
	// ApplyConfiguration), except that a STAGED config counts only once a
	// reboot boots it and a TRY config only until it is reverted.
	ConfigHash string `json:"configHash,omitempty"`
	// KubernetesVersion is the tag of the kubelet image in the running config
	// (machine.kubelet.image), e.g. "v1.34.1".
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// StagedConfigHash is the hash of a config applied in mode STAGED that
	// the next reboot boots with.
	StagedConfigHash string `json:"stagedConfigHash,omitempty"`
	// Bootstrapped is true on the control plane that etcd was bootstrapped
	// on; when that node leaves etcd or goes, the flag passes to another
	// member, so the cluster stays bootstrapped while it has members.
	Bootstrapped bool `json:"bootstrapped,omitempty"`
	// EtcdLeft is true on a control plane that left etcd (EtcdLeaveCluster)
	// or was removed from it (EtcdRemoveMemberByID); its etcd stays stopped
	// until a Reset wipes the node, as Talos's does.
	EtcdLeft bool   `json:"etcdLeft,omitempty"`
	Faults   Faults `json:"faults"`
	Error    string `json:"error,omitempty"`
}

// node is one emulated machine. Its lock guards everything below it; the
// emulator's lock is always taken before a node's, never after.
type node struct {
	em *Emulator

	mu       sync.Mutex
	st       NodeStatus
	cfgBytes []byte
	cfg      config.Provider
	staged   []byte        // a STAGED config the next reboot boots with
	upload   *etcdState    // a snapshot uploaded by EtcdRecover, for Bootstrap to recover from
	tryPrev  *triedFrom    // the config a TRY config reverts to; nil when no try runs
	tryGen   int           // bumped on every config change so a stale try timer does nothing
	lis      net.Listener  // bound for the node's life
	cl       *connListener // the running server's feed; nil while down
	srv      *grpc.Server
	gen      int  // bumped on every transition so stale timers do nothing
	deleted  bool // by Delete: nothing more is persisted
	stopped  bool // by Delete or the emulator's end: the API never comes back
	journal  []string
	apid     apidCreds // apid's TLS while configured, made again when the config's PKI changes

	// One boot's worth of state, replaced when the API comes up (serveLocked).
	bootID string     // /proc/sys/kernel/random/boot_id
	boot   bootTimes  // when the boot reached its stages
	events *eventLog  // the boot's machine events
	cosi   *nodeState // the boot's COSI resources, once asked for
	// images are the images pulled through ImageService.Pull (containerd's
	// store is on disk, so they survive reboots); Upgrade installs from them.
	images []string
	// cosiPending coalesces resource refreshes (cosi.go); cosiSeen is what
	// the last refresh showed of the node to the rest of its cluster.
	cosiPending atomic.Bool
	cosiSeen    memberFacts
}

func (n *node) status() NodeStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st
}

func (n *node) ip() net.IP {
	host, _, _ := net.SplitHostPort(n.st.Address)
	return net.ParseIP(host)
}

func (n *node) logf(format string, args ...any) {
	line := fmt.Sprintf("[%s] %s", n.em.cfg.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	n.journal = append(n.journal, line)
	if len(n.journal) > 200 {
		n.journal = n.journal[len(n.journal)-200:]
	}
}

// loadConfig parses a machine config the way machined would, and refuses one
// the emulator cannot serve mTLS for.
func loadConfig(b []byte) (config.Provider, error) {
	cfg, err := configloader.NewFromBytes(b)
	if err != nil {
		return nil, err
	}
	if cfg.Machine() == nil || cfg.Cluster() == nil {
		return nil, errors.New("the config has no machine or cluster section")
	}
	if ca := cfg.Machine().Security().IssuingCA(); ca == nil || len(ca.Crt) == 0 {
		return nil, errors.New("machine.ca is required")
	}
	return cfg, nil
}

// setConfigLocked adopts a parsed config as the running one.
func (n *node) setConfigLocked(b []byte, cfg config.Provider) {
	n.cfgBytes, n.cfg = b, cfg
	n.tryGen++
	n.st.ConfigHash = configHash(b)
	n.st.KubernetesVersion = ""
	if k := cfg.Machine().Kubelet(); k != nil {
		n.st.KubernetesVersion, _ = versionFromImage(k.Image())
	}
	n.st.ClusterID = cfg.Cluster().ID()
	if n.st.ClusterID == "" {
		n.st.ClusterID = cfg.Cluster().Name()
	}
	if ca := cfg.Machine().Security().IssuingCA(); len(ca.Key) > 0 {
		n.em.learnOSCA(n.st.ClusterID, ca)
	}
	if n.st.Image == "" && cfg.Machine().Install() != nil {
		// The first config installs Talos: from its installer.
		n.st.Image = cfg.Machine().Install().Image()
	}
	n.st.Role = "worker"
	if cfg.Machine().Type().IsControlPlane() {
		n.st.Role = "controlplane"
	}
	n.em.kube.pokeAll() // a new version or new labels for what runs
}

// serveLocked starts the gRPC server for the node's current config (or
// maintenance mode without one), binding the node's address first if it has
// no listener yet.
func (n *node) serveLocked() error {
	if n.stopped {
		return errors.New("node stopped")
	}
	if n.lis == nil {
		lis, err := net.Listen("tcp", n.st.Address)
		if err != nil {
			n.st.Phase, n.st.Error = PhaseFailed, err.Error()
			return err
		}
		n.bindLocked(lis)
	}
	maintenance := n.cfg == nil
	var (
		tlsCfg *tls.Config
		err    error
	)
	if maintenance {
		tlsCfg, err = maintenanceTLS(n.ip())
	} else if _, err = n.apidTLS(n.cfg, n.st.ClusterID, n.ip()); err == nil {
		// Issued now, so a node no one can issue for fails to boot; each
		// handshake then follows the config (apidServerTLS).
		tlsCfg = n.apidServerTLS()
	}
	if err != nil {
		n.st.Phase, n.st.Error = PhaseFailed, err.Error()
		return err
	}
	ms := &machineServer{n: n, maintenance: maintenance}
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.UnaryInterceptor(ms.unary),
		grpc.StreamInterceptor(ms.stream),
	)
	machine.RegisterMachineServiceServer(srv, ms)
	machine.RegisterLifecycleServiceServer(srv, &lifecycleServer{ms: ms})
	registerNodeServices(srv, ms)
	n.bootID = uuid.NewString()
	n.boot = bootTimes{booted: n.em.cfg.Now()}
	n.events = newEventLog(n.bootID)
	n.cosi = nil // made by the boot's first COSI call (cosiServer)
	if !maintenance {
		v1alpha1.RegisterStateServer(srv, &cosiServer{n: n})
	}
	cl := newConnListener(n.lis.Addr())
	n.srv, n.cl = srv, cl
	n.st.Error = ""
	go srv.Serve(cl) //nolint:errcheck // Serve returns when the server is stopped.
	return nil
}

// bindLocked adopts the node's listener for its whole life. The node keeps
// its address bound even while "down" (connections are dropped at once, which
// a client sees as unreachable), so no other node or process can take the
// address during a reboot.
func (n *node) bindLocked(lis net.Listener) {
	n.lis = lis
	n.st.Address = lis.Addr().String() // learns the port in ports mode
	go n.acceptLoop(lis)
}

// acceptLoop hands each connection to the running server, or drops it when
// the node is down.
func (n *node) acceptLoop(lis net.Listener) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		n.mu.Lock()
		cl := n.cl
		n.mu.Unlock()
		if cl == nil {
			c.Close()
			continue
		}
		select {
		case cl.conns <- c:
		case <-cl.done:
			c.Close()
		}
	}
}

// takeServerLocked detaches the running server so it can be stopped without
// holding the lock (a graceful stop waits for handlers, which take the lock).
func (n *node) takeServerLocked() *grpc.Server {
	s := n.srv
	n.srv, n.cl = nil, nil
	return s
}

// stopServer stops s, letting in-flight unary calls (such as the Reboot that
// caused it) finish, but not waiting on followed streams for long.
func stopServer(s *grpc.Server) {
	if s == nil {
		return
	}
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		s.Stop()
		<-done
	}
}

// transition takes the node down (phase down), waits delay, applies change
// (under the lock) and brings the API up again, then marks services healthy
// after ServiceStartDelay. It is the one path for install, reboot, upgrade
// and reset, so each is a named sequence of the same stages.
func (n *node) transition(down Phase, delay time.Duration, change func()) {
	seq := "reboot"
	if down == PhaseInstalling {
		seq = "install"
	}
	n.transitionBy("", seq, down, delay, change)
}

// transitionBy is transition for an action with an actor id (Reboot, Reset,
// an upgrade's reboot): the boot's last events carry it, so `talosctl
// --wait` can follow its action.
func (n *node) transitionBy(actorID, seq string, down Phase, delay time.Duration, change func()) {
	n.mu.Lock()
	n.gen++
	gen := n.gen
	n.goingDownLocked(actorID, seq)
	srv := n.takeServerLocked()
	n.st.Phase = down
	n.logf("going down: %s", down)
	n.mu.Unlock()
	n.em.kube.pokeAll()
	stopServer(srv)
	n.em.persist(n)

	n.em.cfg.AfterFunc(delay, func() {
		n.mu.Lock()
		if n.gen != gen || n.stopped {
			n.mu.Unlock()
			return
		}
		n.rebootConfigLocked()
		if change != nil {
			change()
		}
		n.bootLocked()
		n.mu.Unlock()
		n.em.persist(n)
	})
}

// bootLocked brings the API up after a (re)boot: maintenance mode without a
// config, else Booting and Running after ServiceStartDelay.
func (n *node) bootLocked() {
	if n.st.Faults.Unreachable {
		n.st.Phase = PhaseUnreachable
		return
	}
	if err := n.startLocked(); err != nil {
		n.em.cfg.Logf("node %s: %v", n.st.Name, err)
	}
}

// startLocked brings the API up. A worker of a cluster whose control planes
// the emulator has not seen yet has no one to issue its certificate (trustd
// runs on control planes), so it stays unreachable in PhaseBooting and
// retries, as a real worker waits for trustd.
func (n *node) startLocked() error {
	if n.cfg != nil && n.em.osCA(n.st.ClusterID, nil) == nil {
		if n.lis == nil {
			lis, err := net.Listen("tcp", n.st.Address)
			if err != nil {
				n.st.Phase, n.st.Error = PhaseFailed, err.Error()
				return err
			}
			n.bindLocked(lis)
		}
		n.st.Phase, n.st.Error = PhaseBooting, "waiting for trustd: no control plane of this cluster has booted"
		gen := n.gen
		n.em.cfg.AfterFunc(n.em.cfg.ServiceStartDelay, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.gen == gen && !n.stopped {
				n.bootLocked()
			}
		})
		return nil
	}
	if err := n.serveLocked(); err != nil {
		return err
	}
	n.bootOnlyPhaseLocked()
	return nil
}

// setFaults applies f, taking the API down or bringing it back for Unreachable.
func (n *node) setFaults(f Faults) {
	n.mu.Lock()
	was := n.st.Faults.Unreachable
	n.st.Faults = f
	var stop *grpc.Server
	switch {
	case f.Unreachable && !was && n.srv != nil:
		// A node that is down mid-reboot stays down: the reboot's own timer
		// finds the fault and leaves it unreachable, keeping what the reboot changes.
		stop = n.takeServerLocked()
		n.st.Phase = PhaseUnreachable
		n.logf("fault: unreachable")
	case !f.Unreachable && was && n.st.Phase == PhaseUnreachable:
		n.gen++
		n.bootLocked()
	}
	n.mu.Unlock()
	stopServer(stop)
	n.em.persist(n)
}

// shutdown stops the node for good (Delete, or the emulator stopping).
func (n *node) shutdown(deleted bool) {
	n.mu.Lock()
	n.gen++
	n.deleted = n.deleted || deleted
	n.stopped = true
	srv := n.takeServerLocked()
	lis := n.lis
	n.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	if lis != nil {
		lis.Close()
	}
}
