package emulator

import (
	"context"
	"sort"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// up reports whether a phase serves the API (a member in it takes part in etcd).
func up(p Phase) bool { return p == PhaseRunning || p == PhaseBooting }

// etcdLeader names the cluster's etcd leader: the control plane etcd was
// bootstrapped on while it is up, else the first member (by name) that is up,
// as etcd elects another leader while the old one is down. It is stateless on
// purpose (nothing to persist); real etcd need not hand leadership back. ok is
// false before bootstrap or when no member is up.
func (e *Emulator) etcdLeader(clusterID string) (name string, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var running []string
	bootstrapped := false
	for _, n := range e.controlPlanesLocked(clusterID) {
		n.mu.Lock()
		st := n.st
		n.mu.Unlock()
		bootstrapped = bootstrapped || st.Bootstrapped
		if !up(st.Phase) {
			continue
		}
		if st.Bootstrapped {
			name = st.Name
		}
		running = append(running, st.Name)
	}
	if !bootstrapped || len(running) == 0 {
		return "", false
	}
	if name != "" {
		return name, true
	}
	sort.Strings(running)
	return running[0], true
}

// EtcdStatus reports this member's status: its id, the leader's id, and the
// unhealthy fault as member errors.
func (m *machineServer) EtcdStatus(context.Context, *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	st := m.n.status()
	if st.Role != "controlplane" {
		return nil, status.Error(codes.FailedPrecondition, "etcd does not run on a worker")
	}
	leader, ok := m.n.em.etcdLeader(st.ClusterID)
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "etcd is not bootstrapped")
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
