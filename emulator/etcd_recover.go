package emulator

import (
	"context"
	"errors"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Backup and disaster recovery, as Talos does them: EtcdSnapshot streams a
// member's snapshot; EtcdRecover uploads one to a control plane, kept there
// (Talos writes it beside the etcd data); Bootstrap with recover_etcd starts
// the cluster's etcd from it. The snapshot format is in etcd_snapshot.go.

// EtcdSnapshot streams a snapshot of the cluster's etcd from this member in
// 1 MiB chunks. Like the other etcd calls it answers FailedPrecondition when
// etcd does not run here (a worker, a cluster not bootstrapped or wiped, a
// node that left).
func (m *machineServer) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	st, err := m.selfMember()
	if err != nil {
		return err
	}
	if m.realEtcd() {
		w := &chunkSender{srv: srv, meta: m.meta()}
		if err := m.realEtcdSnapshot(srv.Context(), w); err != nil {
			return sendError(srv.Context(), err)
		}
		return sendError(srv.Context(), w.flush())
	}
	s, ok := m.n.em.etcdSnapshotState(st.ClusterID)
	if !ok {
		return status.Error(codes.FailedPrecondition, "etcd is not bootstrapped")
	}
	w := &chunkSender{srv: srv, meta: m.meta()}
	if err := writeSnapshot(w, s); err != nil {
		return sendError(srv.Context(), err)
	}
	return sendError(srv.Context(), w.flush())
}

// etcdSnapshotState is the cluster's etcd data to snapshot; it is never
// modified once stored, so it streams without a lock.
func (e *Emulator) etcdSnapshotState(clusterID string) (*etcdState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.etcdStateLocked(clusterID)
}

// chunkSender sends what is written to it as common.Data messages of
// snapshotChunk bytes. Each message gets a buffer of its own: gRPC may still
// hold a sent message (stats handlers read it lazily).
type chunkSender struct {
	srv  grpc.ServerStreamingServer[common.Data]
	meta *common.Metadata
	buf  []byte
}

func (c *chunkSender) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, snapshotChunk)
		}
		k := copy(c.buf[len(c.buf):cap(c.buf)], p)
		c.buf, p = c.buf[:len(c.buf)+k], p[k:]
		if len(c.buf) == cap(c.buf) {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (c *chunkSender) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	b := c.buf
	c.buf = nil
	return c.srv.Send(&common.Data{Metadata: c.meta, Bytes: b})
}

// sendError reports a stream that ended early with the context's status
// when the caller went away.
func sendError(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return err
}

// EtcdRecover takes an uploaded snapshot and keeps it on this control plane
// for Bootstrap with recover_etcd. It is checked as it arrives: a truncated,
// altered or malformed snapshot, or one beyond the size bounds, is refused
// with InvalidArgument and the node keeps what it had. As in Talos, an
// upload to a running member is accepted (a recovering bootstrap on a
// bootstrapped cluster is what fails), and a later upload replaces it.
func (m *machineServer) EtcdRecover(srv grpc.ClientStreamingServer[common.Data, machine.EtcdRecoverResponse]) error {
	n := m.n
	if st := n.status(); st.Role != "controlplane" {
		return status.Error(codes.FailedPrecondition, "etcd does not run on a worker")
	}
	if m.realEtcd() {
		if err := m.realEtcdRecover(&recvReader{srv: srv}); err != nil {
			return sendError(srv.Context(), err)
		}
		n.mu.Lock()
		n.logf("etcd snapshot uploaded for recovery")
		n.mu.Unlock()
		return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{Metadata: m.meta()}}})
	}
	s, err := readSnapshot(&recvReader{srv: srv}, "")
	switch {
	case errors.Is(err, errSnapshot):
		return status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return sendError(srv.Context(), err)
	}
	n.mu.Lock()
	n.upload = s
	n.logf("etcd snapshot uploaded for recovery: revision %d, %d keys", s.Revision, len(s.Keys))
	n.mu.Unlock()
	n.em.persist(n)
	return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{Metadata: m.meta()}}})
}

// recvReader reads an uploaded stream's bytes.
type recvReader struct {
	srv grpc.ClientStreamingServer[common.Data, machine.EtcdRecoverResponse]
	buf []byte
}

func (r *recvReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		msg, err := r.srv.Recv()
		if err != nil {
			return 0, err // io.EOF once the client closed its side
		}
		r.buf = msg.GetBytes()
	}
	k := copy(p, r.buf)
	r.buf = r.buf[k:]
	return k, nil
}

// bootstrap starts etcd on n, once per cluster, as Talos: only on a running
// control plane that is in etcd, refused with AlreadyExists when the
// cluster's etcd holds data (Talos: "etcd data directory is not empty"),
// which includes a recovering bootstrap on a healthy cluster. fromSnapshot:
// the data comes from the snapshot uploaded to n (FailedPrecondition
// without one) and the upload is consumed; else etcd starts empty at
// revision 1. The other control planes join by being members.
func (e *Emulator) bootstrap(n *node, fromSnapshot bool) error {
	e.mu.Lock()
	n.mu.Lock()
	st, upload := n.st, n.upload
	n.mu.Unlock()
	uploaded := upload != nil
	if e.kube != nil {
		uploaded = e.kube.hasRecoverUpload(st.Name)
	}
	if err := e.mayBootstrapLocked(st, fromSnapshot, uploaded); err != nil {
		e.mu.Unlock()
		return err
	}
	if e.kube != nil && fromSnapshot {
		if err := e.kube.markRestore(st.Name); err != nil {
			e.mu.Unlock()
			return status.Errorf(codes.Internal, "keeping the snapshot to restore: %v", err)
		}
		upload = &etcdState{Revision: 1}
	}
	data := freshEtcd(st.ClusterID)
	if fromSnapshot {
		restored := *upload
		restored.Cluster = st.ClusterID
		data = &restored
	}
	e.etcd[st.ClusterID] = data
	n.mu.Lock()
	n.st.Bootstrapped = true
	if fromSnapshot {
		n.upload = nil
		n.logf("etcd bootstrapped, recovered from a snapshot at revision %d", data.Revision)
	} else {
		n.logf("etcd bootstrapped")
	}
	n.mu.Unlock()
	e.mu.Unlock()
	e.persist(n)
	e.persistEtcd(st.ClusterID)
	return nil
}

// mayBootstrapLocked says why the node in st may not bootstrap. Caller holds e.mu.
func (e *Emulator) mayBootstrapLocked(st NodeStatus, fromSnapshot, uploaded bool) error {
	switch {
	case st.Role != "controlplane":
		return status.Error(codes.FailedPrecondition, "bootstrap is only possible on a control plane")
	case st.Phase != PhaseRunning && st.Phase != PhaseBooting:
		return status.Errorf(codes.Unavailable, "node is %s", st.Phase)
	}
	// AlreadyExists comes first, for any node: callers (talos.NodeAPI.Bootstrap)
	// take it as "bootstrapped, whoever did it".
	for _, cp := range e.controlPlanesLocked(st.ClusterID) {
		cp.mu.Lock()
		b := cp.st.Bootstrapped
		cp.mu.Unlock()
		if b {
			return status.Errorf(codes.AlreadyExists, "etcd is already bootstrapped (on %s)", cp.st.Name)
		}
	}
	switch {
	case st.EtcdLeft:
		// It would be a bootstrapped node that is not a member.
		return status.Error(codes.FailedPrecondition, "etcd is stopped on this node: it left the etcd cluster")
	case fromSnapshot && !uploaded:
		return status.Error(codes.FailedPrecondition, "no etcd snapshot to recover from: upload one with EtcdRecover first")
	}
	return nil
}
