package emulator

import (
	"context"
	"hash/fnv"
	"net"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Etcd membership is derived from the nodes rather than kept as a list of its
// own, so there is nothing extra to persist or to get out of step: once a
// cluster is bootstrapped, its members are its configured control planes that
// have not left (NodeStatus.EtcdLeft). A control plane configured later joins
// by being configured; one that leaves stays out until a Reset wipes it.

// memberID is a stable etcd member id for a node name, so every node of a
// cluster, and every restart of the emulator, names a member the same way.
func memberID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// up reports whether a phase serves the API (a member in it takes part in etcd).
func up(p Phase) bool { return p == PhaseRunning || p == PhaseBooting }

// etcdCluster is one cluster's etcd as its control planes make it up.
type etcdCluster struct {
	bootstrapped bool
	members      []*node // sorted by name
}

// etcdLocked reads a cluster's etcd. Caller holds e.mu.
func (e *Emulator) etcdLocked(clusterID string) etcdCluster {
	var c etcdCluster
	for _, n := range e.controlPlanesLocked(clusterID) {
		n.mu.Lock()
		c.bootstrapped = c.bootstrapped || n.st.Bootstrapped
		if !n.st.EtcdLeft {
			c.members = append(c.members, n)
		}
		n.mu.Unlock()
	}
	if !c.bootstrapped {
		c.members = nil
	}
	// Name never changes after a node is made, so it is read without n.mu.
	slices.SortFunc(c.members, func(a, b *node) int { return strings.Compare(a.st.Name, b.st.Name) })
	return c
}

// bootstrapped reports whether etcd was bootstrapped in the cluster.
func (e *Emulator) bootstrapped(clusterID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.etcdLocked(clusterID).bootstrapped
}

// etcdMembers lists the statuses of the cluster's etcd members, sorted by
// name; ok is false before bootstrap.
func (e *Emulator) etcdMembers(clusterID string) (members []NodeStatus, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.etcdLocked(clusterID)
	for _, n := range c.members {
		members = append(members, n.status())
	}
	return members, c.bootstrapped
}

// etcdLeader names the cluster's etcd leader: the member holding the
// bootstrap flag while it is up, else the first member (by name) that is up,
// as etcd elects another leader while the old one is down. It is stateless on
// purpose (nothing to persist); real etcd need not hand leadership back. ok is
// false before bootstrap or when no member is up.
func (e *Emulator) etcdLeader(clusterID string) (name string, ok bool) {
	members, _ := e.etcdMembers(clusterID)
	for _, st := range members {
		if !up(st.Phase) {
			continue
		}
		if st.Bootstrapped {
			return st.Name, true
		}
		if name == "" {
			name = st.Name
		}
	}
	return name, name != ""
}

// removeMember takes the member with id out of the cluster's etcd, refusing
// to leave it with no member. Leaving is removing oneself.
func (e *Emulator) removeMember(clusterID string, id uint64) error {
	e.mu.Lock()
	c := e.etcdLocked(clusterID)
	i := slices.IndexFunc(c.members, func(n *node) bool { return memberID(n.st.Name) == id })
	if i < 0 {
		e.mu.Unlock()
		return status.Errorf(codes.NotFound, "etcd member %x not found", id)
	}
	if len(c.members) == 1 {
		e.mu.Unlock()
		return status.Error(codes.FailedPrecondition, "etcd would be left with no member")
	}
	gone := c.members[i]
	gone.mu.Lock()
	gone.st.EtcdLeft = true
	gone.logf("left the etcd cluster; etcd stopped")
	gone.mu.Unlock()
	heir := e.handOverBootstrapLocked(gone)
	e.mu.Unlock()
	e.persist(gone)
	if heir != nil {
		e.persist(heir)
	}
	return nil
}

// handOverBootstrapLocked moves the bootstrap flag from a node that leaves
// etcd (or is reset or deleted) to the first remaining member, so the cluster
// stays bootstrapped while it has members. It returns the heir to persist.
// Caller holds e.mu, not n.mu.
func (e *Emulator) handOverBootstrapLocked(n *node) *node {
	n.mu.Lock()
	st := n.st
	n.mu.Unlock()
	if !st.Bootstrapped || st.Role != "controlplane" {
		return nil
	}
	for _, m := range e.etcdLocked(st.ClusterID).members {
		if m == n {
			continue
		}
		n.mu.Lock()
		n.st.Bootstrapped = false
		n.mu.Unlock()
		m.mu.Lock()
		m.st.Bootstrapped = true
		m.mu.Unlock()
		return m
	}
	return nil
}

// handOverBootstrap is handOverBootstrapLocked for callers without e.mu.
func (e *Emulator) handOverBootstrap(n *node) {
	e.mu.Lock()
	heir := e.handOverBootstrapLocked(n)
	e.mu.Unlock()
	if heir != nil {
		e.persist(heir)
	}
}

// selfMember is the caller's own status if it runs etcd, else the error
// Talos answers when etcd is not running on the node.
func (m *machineServer) selfMember() (NodeStatus, error) {
	st := m.n.status()
	if st.Role != "controlplane" {
		return st, status.Error(codes.FailedPrecondition, "etcd does not run on a worker")
	}
	if !m.n.em.bootstrapped(st.ClusterID) {
		return st, status.Error(codes.FailedPrecondition, "etcd is not bootstrapped")
	}
	if st.EtcdLeft {
		return st, status.Error(codes.FailedPrecondition, "etcd is not running: this node left the etcd cluster")
	}
	return st, nil
}

// EtcdMemberList lists the members of the node's cluster.
func (m *machineServer) EtcdMemberList(ctx context.Context, _ *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	st, err := m.selfMember()
	if err != nil {
		return nil, err
	}
	if m.realEtcd() {
		return m.realEtcdMemberList(ctx)
	}
	members, _ := m.n.em.etcdMembers(st.ClusterID)
	var out []*machine.EtcdMember
	for _, mb := range members {
		host, _, _ := net.SplitHostPort(mb.Address)
		out = append(out, &machine.EtcdMember{
			Id: memberID(mb.Name), Hostname: mb.Name,
			PeerUrls:   []string{"https://" + net.JoinHostPort(host, "2380")},
			ClientUrls: []string{"https://" + net.JoinHostPort(host, "2379")},
		})
	}
	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{{Metadata: m.meta(), Members: out}}}, nil
}

// EtcdLeaveCluster takes this node out of etcd; its etcd stops.
func (m *machineServer) EtcdLeaveCluster(ctx context.Context, _ *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	st, err := m.selfMember()
	if err != nil {
		return nil, err
	}
	if m.realEtcd() {
		err = m.realRemoveMember(ctx, true, 0)
	} else {
		err = m.n.em.removeMember(st.ClusterID, memberID(st.Name))
	}
	if err != nil {
		return nil, err
	}
	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{Metadata: m.meta()}}}, nil
}

// EtcdRemoveMemberByID removes a member (typically an unreachable one)
// through this node, which must itself be a member.
func (m *machineServer) EtcdRemoveMemberByID(ctx context.Context, req *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	st, err := m.selfMember()
	if err != nil {
		return nil, err
	}
	if m.realEtcd() {
		err = m.realRemoveMember(ctx, false, req.GetMemberId())
	} else {
		err = m.n.em.removeMember(st.ClusterID, req.GetMemberId())
	}
	if err != nil {
		return nil, err
	}
	return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{Metadata: m.meta()}}}, nil
}

// EtcdStatus reports this member's status: its id, the leader's id, and the
// unhealthy fault as member errors.
func (m *machineServer) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	st, err := m.selfMember()
	if err != nil {
		return nil, err
	}
	if m.realEtcd() {
		return m.realEtcdStatus(ctx)
	}
	leader, ok := m.n.em.etcdLeader(st.ClusterID)
	if !ok {
		return nil, status.Error(codes.Unavailable, "etcd has no leader: no member is up")
	}
	ms := &machine.EtcdMemberStatus{
		MemberId: memberID(st.Name), Leader: memberID(leader),
		ProtocolVersion: "3.5.0", StorageVersion: "3.5.0", DbSize: 20 << 20, DbSizeInUse: 10 << 20,
	}
	if st.Faults.Unhealthy {
		ms.Errors = []string{"emulated fault: unhealthy"}
	}
	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{Metadata: m.meta(), MemberStatus: ms}}}, nil
}
