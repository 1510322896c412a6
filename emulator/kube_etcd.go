package emulator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// With the real control plane (Config.Kube), the Talos etcd calls go to the
// node's real etcd member, as machined's do: the member ids, the leader, the
// database size and the snapshot are etcd's own.

// realEtcd reports whether etcd calls on the node go to a real member.
func (m *machineServer) realEtcd() bool { return m.n.em.kube != nil }

// etcdClient is a client of the node's own running member, or the error
// Talos answers while etcd does not run there.
func (k *kubeSupervisor) etcdClient(ctx context.Context, node string) (*clientv3.Client, error) {
	k.mu.Lock()
	r := k.runners[node]
	var cp interface {
		Etcd(context.Context) (*clientv3.Client, error)
	}
	if r != nil && r.cp != nil {
		cp = r.cp
	}
	k.mu.Unlock()
	if cp == nil {
		return nil, status.Error(codes.Unavailable, "etcd is not running on this node yet")
	}
	cli, err := cp.Etcd(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "etcd: %v", err)
	}
	return cli, nil
}

func (m *machineServer) realMemberList(ctx context.Context) (*clientv3.MemberListResponse, *clientv3.Client, error) {
	cli, err := m.n.em.kube.etcdClient(ctx, m.n.st.Name)
	if err != nil {
		return nil, nil, err
	}
	resp, err := cli.MemberList(ctx)
	if err != nil {
		cli.Close()
		return nil, nil, status.Errorf(codes.Unavailable, "etcd member list: %v", err)
	}
	return resp, cli, nil
}

func (m *machineServer) realEtcdMemberList(ctx context.Context) (*machine.EtcdMemberListResponse, error) {
	resp, cli, err := m.realMemberList(ctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	var out []*machine.EtcdMember
	for _, mb := range resp.Members {
		out = append(out, &machine.EtcdMember{Id: mb.ID, Hostname: mb.Name, PeerUrls: mb.PeerURLs, ClientUrls: mb.ClientURLs, IsLearner: mb.IsLearner})
	}
	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{{Metadata: m.meta(), Members: out}}}, nil
}

// realRemoveMember removes a member from the real etcd (refusing the last
// one) and marks its node as out of etcd, so its supervisor stops its etcd
// and its data is not reused.
func (m *machineServer) realRemoveMember(ctx context.Context, self bool, id uint64) error {
	resp, cli, err := m.realMemberList(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	var name string
	for _, mb := range resp.Members {
		if (self && mb.Name == m.n.st.Name) || (!self && mb.ID == id) {
			id, name = mb.ID, mb.Name
		}
	}
	if name == "" {
		return status.Errorf(codes.NotFound, "etcd member %x not found", id)
	}
	if len(resp.Members) == 1 {
		return status.Error(codes.FailedPrecondition, "etcd would be left with no member")
	}
	// A member that removes itself through its own server may see that
	// server stop before it answers ("etcdserver: server stopped", as
	// Talos's own leave reports it): ask through another member.
	via := cli
	if name == m.n.st.Name {
		for _, mb := range resp.Members {
			if mb.Name == name || mb.IsLearner || mb.Name == "" {
				continue
			}
			if other, err := m.n.em.kube.etcdClient(ctx, mb.Name); err == nil {
				defer other.Close()
				via = other
				break
			}
		}
	}
	if err := removeWhenHealthy(ctx, via, id); err != nil && !memberGone(ctx, via, id) {
		return status.Errorf(codes.FailedPrecondition, "etcd member remove: %v", err)
	}
	m.n.em.markEtcdLeft(name)
	m.n.em.kube.pokeAll()
	return nil
}

// removeWhenHealthy removes a member, retrying while etcd refuses with
// "unhealthy cluster". etcd's strict reconfiguration check counts only the
// members its leader has been connected to for at least five seconds, so a
// removal right after another member joined (or restarted) is refused for a
// few seconds although the cluster is fine; Talos's leave retries the same
// way. Bounded by unhealthyRetryFor and by ctx.
func removeWhenHealthy(ctx context.Context, cli *clientv3.Client, id uint64) error {
	deadline := time.Now().Add(unhealthyRetryFor)
	for {
		_, err := cli.MemberRemove(ctx, id)
		if !errors.Is(err, rpctypes.ErrUnhealthy) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// memberGone reports whether the cluster (asked through cli) no longer lists
// the member: a removal whose answer was lost went through.
func memberGone(ctx context.Context, cli *clientv3.Client, id uint64) bool {
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return false
	}
	for _, mb := range resp.Members {
		if mb.ID == id {
			return false
		}
	}
	return true
}

// unhealthyRetryFor bounds removeWhenHealthy: three times etcd's health
// interval.
const unhealthyRetryFor = 15 * time.Second

// markEtcdLeft records that the named node is no longer an etcd member.
func (e *Emulator) markEtcdLeft(name string) {
	n, err := e.node(name)
	if err != nil {
		return
	}
	n.mu.Lock()
	n.st.EtcdLeft = true
	n.logf("left the etcd cluster; etcd stopped")
	n.mu.Unlock()
	e.handOverBootstrap(n)
	e.persist(n)
}

func (m *machineServer) realEtcdStatus(ctx context.Context) (*machine.EtcdStatusResponse, error) {
	cli, err := m.n.em.kube.etcdClient(ctx, m.n.st.Name)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	eps := cli.Endpoints()
	if len(eps) == 0 {
		return nil, status.Error(codes.Unavailable, "etcd has no endpoint")
	}
	s, err := cli.Status(ctx, eps[0])
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "etcd status: %v", err)
	}
	ms := &machine.EtcdMemberStatus{
		MemberId: s.Header.MemberId, Leader: s.Leader, ProtocolVersion: s.Version, StorageVersion: s.StorageVersion,
		DbSize: s.DbSize, DbSizeInUse: s.DbSizeInUse, RaftIndex: s.RaftIndex, RaftTerm: s.RaftTerm,
		RaftAppliedIndex: s.RaftAppliedIndex, Errors: s.Errors, IsLearner: s.IsLearner,
	}
	if m.n.status().Faults.Unhealthy {
		ms.Errors = append(ms.Errors, "emulated fault: unhealthy")
	}
	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{Metadata: m.meta(), MemberStatus: ms}}}, nil
}

// realEtcdSnapshot copies the member's snapshot to w.
func (m *machineServer) realEtcdSnapshot(ctx context.Context, w io.Writer) error {
	cli, err := m.n.em.kube.etcdClient(ctx, m.n.st.Name)
	if err != nil {
		return err
	}
	defer cli.Close()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "etcd snapshot: %v", err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	return nil
}

// realForfeitLeadership moves leadership to another voting member.
func (m *machineServer) realForfeitLeadership(ctx context.Context) (string, error) {
	resp, cli, err := m.realMemberList(ctx)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	st, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		return "", status.Errorf(codes.Unavailable, "etcd status: %v", err)
	}
	if st.Leader != st.Header.MemberId {
		return "", nil
	}
	for _, mb := range resp.Members {
		if mb.ID != st.Header.MemberId && !mb.IsLearner {
			if _, err := cli.MoveLeader(ctx, mb.ID); err != nil {
				return "", status.Errorf(codes.Unavailable, "etcd move leader: %v", err)
			}
			return mb.Name, nil
		}
	}
	return "", nil
}

// EtcdForfeitLeadership makes this member hand etcd leadership to another
// voting member if it leads (real etcd only; the light mode derives its
// leader from the nodes and has none to move).
func (m *machineServer) EtcdForfeitLeadership(ctx context.Context, _ *machine.EtcdForfeitLeadershipRequest) (*machine.EtcdForfeitLeadershipResponse, error) {
	if _, err := m.selfMember(); err != nil {
		return nil, err
	}
	if !m.realEtcd() {
		return nil, status.Error(codes.Unimplemented, "the light emulator has no etcd leadership to move")
	}
	to, err := m.realForfeitLeadership(ctx)
	if err != nil {
		return nil, err
	}
	return &machine.EtcdForfeitLeadershipResponse{Messages: []*machine.EtcdForfeitLeadership{{Metadata: m.meta(), Member: to}}}, nil
}

// Recovery with the real etcd, as Talos does it: EtcdRecover keeps the
// uploaded snapshot beside the etcd data (recover.db in the node's dir, until
// a reset); Bootstrap with recover_etcd marks it for restoring (restore.db);
// the supervisor then restores it with etcdutl into a one-member cluster and
// starts etcd on it, and the other control planes join as after any
// bootstrap.

const (
	recoverFile = "recover.db"
	restoreFile = "restore.db"
)

// nodeDir is the node's Kubernetes data dir.
func (k *kubeSupervisor) nodeDir(node string) string { return filepath.Join(k.dir, node) }

// realEtcdRecover receives an uploaded snapshot: bounded in size, and ending,
// as every etcd snapshot the Snapshot API streams does, in the SHA-256 of the
// bytes before it; a damaged one is refused with InvalidArgument and the node
// keeps what it had.
func (m *machineServer) realEtcdRecover(r io.Reader) error {
	dir := m.n.em.kube.nodeDir(m.n.st.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(r, maxSnapshot+1))
	if err != nil {
		return err
	}
	if n > maxSnapshot {
		return status.Errorf(codes.InvalidArgument, "the snapshot is larger than %d bytes", int64(maxSnapshot))
	}
	if err := checkSnapshotHash(f, n); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, recoverFile))
}

// checkSnapshotHash checks that the n bytes of f end in the SHA-256 of the
// bytes before them.
func checkSnapshotHash(f *os.File, n int64) error {
	if n < sha256.Size+512 {
		return fmt.Errorf("the snapshot is %d bytes: too short to be an etcd snapshot", n)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, n-sha256.Size)); err != nil {
		return err
	}
	sum := make([]byte, sha256.Size)
	if _, err := f.ReadAt(sum, n-sha256.Size); err != nil {
		return err
	}
	if !bytes.Equal(sum, h.Sum(nil)) {
		return errors.New("the snapshot's trailing SHA-256 does not match its content: truncated or altered")
	}
	return nil
}

// hasRecoverUpload reports whether a snapshot was uploaded to the node.
func (k *kubeSupervisor) hasRecoverUpload(node string) bool {
	_, err := os.Stat(filepath.Join(k.nodeDir(node), recoverFile))
	return err == nil
}

// markRestore makes the node's next etcd start restore the uploaded snapshot.
func (k *kubeSupervisor) markRestore(node string) error {
	dir := k.nodeDir(node)
	b, err := os.ReadFile(filepath.Join(dir, recoverFile))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, restoreFile), b, 0o600)
}

// restoreEtcd restores dir/restore.db into dir/etcd as a one-member cluster
// of the node, with etcdutl, as Talos's recovering bootstrap does.
func restoreEtcd(ctx context.Context, etcdutl, dir, name, peerURL string) error {
	tmp := filepath.Join(dir, "etcd.restoring")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, etcdutl, "snapshot", "restore", filepath.Join(dir, restoreFile),
		"--data-dir", tmp, "--name", name, "--initial-cluster", name+"="+peerURL,
		"--initial-advertise-peer-urls", peerURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("etcdutl snapshot restore: %w: %s", err, bytes.TrimSpace(out))
	}
	if err := os.RemoveAll(filepath.Join(dir, "etcd")); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "etcd"))
}
