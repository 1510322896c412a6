package emulator

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// machineServer is one boot's MachineService: maintenance is fixed when the
// server starts, so a call is judged by the TLS it arrived over, not by a
// phase that may have moved on.
type machineServer struct {
	machine.UnimplementedMachineServiceServer

	n           *node
	maintenance bool
}

func (m *machineServer) meta() *common.Metadata {
	return &common.Metadata{Hostname: m.n.st.Name}
}

// Version reports the node's Talos version.
func (m *machineServer) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	m.n.mu.Lock()
	defer m.n.mu.Unlock()
	return &machine.VersionResponse{Messages: []*machine.Version{{
		Metadata: m.meta(),
		Version: &machine.VersionInfo{
			Tag: m.n.st.Version, Sha: "emulated", GoVersion: runtime.Version(),
			Os: "linux", Arch: "amd64",
		},
		Platform: &machine.PlatformInfo{Name: "emulated", Mode: "metal"},
	}}}, nil
}

// Bootstrap starts etcd on one control plane of a cluster, once; with
// recover_etcd, from the snapshot uploaded by EtcdRecover (etcd_recover.go).
// recover_skip_hash_check is ignored: an upload is always checked.
func (m *machineServer) Bootstrap(_ context.Context, req *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	if err := m.n.em.bootstrap(m.n, req.GetRecoverEtcd()); err != nil {
		return nil, err
	}
	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{Metadata: m.meta()}}}, nil
}

// versionFromImage takes the tag of an installer image reference
// ("ghcr.io/siderolabs/installer:v1.13.1", with or without a digest).
func versionFromImage(image string) (string, bool) {
	ref, _, _ := strings.Cut(image, "@")
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash || colon == len(ref)-1 {
		return "", false
	}
	return ref[colon+1:], true
}

// Upgrade acknowledges, then reboots into the image's version after
// UpgradeDelay + RebootDelay, unless the fail-next-upgrade fault is set. A
// node still starting its services takes the call once they run, as Talos's
// upgrade sequence takes the boot sequence over: a node that answers its API
// does not refuse an upgrade for being mid-boot.
func (m *machineServer) Upgrade(ctx context.Context, req *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	version, ok := versionFromImage(req.GetImage())
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "image %q has no tag to upgrade to", req.GetImage())
	}
	n := m.n
	if err := n.em.checkInstaller(req.GetImage()); err != nil {
		return nil, err
	}
	if err := n.awaitBooted(ctx); err != nil {
		return nil, err
	}
	n.mu.Lock()
	if n.st.Faults.FailNextUpgrade {
		n.st.Faults.FailNextUpgrade = false
		n.logf("upgrade to %s failed: emulated fault", version)
		n.mu.Unlock()
		n.em.persist(n)
		return nil, status.Errorf(codes.Internal, "upgrade to %s failed: emulated fault", version)
	}
	if n.st.Phase != PhaseRunning {
		n.mu.Unlock()
		return nil, status.Errorf(codes.Unavailable, "node is %s, not running", n.st.Phase)
	}
	n.logf("upgrade to %s requested", version)
	n.st.RebootingInto, n.st.RebootingIntoImage = version, req.GetImage()
	n.mu.Unlock()
	// On disk before the answer: the reboot must survive the emulator.
	n.em.persist(n)
	actor := uuid.NewString()
	n.afterShutdownDelay(func() {
		n.transitionBy(actor, "upgrade", PhaseRebooting, n.em.cfg.UpgradeDelay+n.em.cfg.RebootDelay, func() {
			n.st.Version, n.st.Staged, n.st.RebootingInto = version, "", ""
			n.st.Image, n.st.StagedImage, n.st.RebootingIntoImage = req.GetImage(), "", ""
			n.logf("upgraded to %s", version)
		})
	})
	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{
		Metadata: m.meta(), Ack: "Upgrade request received", ActorId: actor,
	}}}, nil
}

// bootPoll is how often awaitBooted looks at the phase.
const bootPoll = 20 * time.Millisecond

// awaitBooted returns once the node is past PhaseBooting, or ctx's error as
// a status when it ends first.
func (n *node) awaitBooted(ctx context.Context) error {
	for n.status().Phase == PhaseBooting {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-time.After(bootPoll):
		}
	}
	return nil
}

// Reboot takes the node down for RebootDelay.
func (m *machineServer) Reboot(context.Context, *machine.RebootRequest) (*machine.RebootResponse, error) {
	n := m.n
	actor := uuid.NewString()
	n.afterShutdownDelay(func() {
		n.transitionBy(actor, "reboot", PhaseRebooting, n.em.cfg.RebootDelay, func() {
			if n.st.Staged != "" {
				n.st.Version, n.st.Staged = n.st.Staged, ""
				if n.st.StagedImage != "" {
					n.st.Image, n.st.StagedImage = n.st.StagedImage, ""
				}
				n.logf("booting the staged %s", n.st.Version)
			}
		})
	})
	return &machine.RebootResponse{Messages: []*machine.Reboot{{Metadata: m.meta(), ActorId: actor}}}, nil
}

// Reset wipes the config and reboots into maintenance mode.
func (m *machineServer) Reset(ctx context.Context, req *machine.ResetRequest) (*machine.ResetResponse, error) {
	n := m.n
	// With the real etcd, a graceful reset of a member leaves etcd first,
	// while its etcd still runs, as Talos's does: removing a stopped member
	// later needs a quorum the remaining ones may not have (one of two).
	if st := n.status(); m.realEtcd() && req.GetGraceful() && st.Role == "controlplane" && !st.EtcdLeft && n.em.bootstrapped(st.ClusterID) {
		if err := m.realRemoveMember(ctx, true, 0); err != nil && status.Code(err) != codes.NotFound &&
			!strings.Contains(err.Error(), "no member") {
			return nil, err
		}
	}
	// The cluster keeps its bootstrap with its other members (Talos's graceful
	// reset leaves etcd first); a reset of the last member unbootstraps it.
	n.em.handOverBootstrap(n)
	actor := uuid.NewString()
	n.afterShutdownDelay(func() {
		n.transitionBy(actor, "reset", PhaseRebooting, n.em.cfg.RebootDelay, func() {
			n.wipeConfigLocked()
			n.upload = nil // EPHEMERAL, where Talos keeps it, is wiped too
			n.images = nil // so is containerd's image store
			n.logf("reset: config wiped")
		})
	})
	return &machine.ResetResponse{Messages: []*machine.Reset{{Metadata: m.meta(), ActorId: actor}}}, nil
}

// streamLines sends lines, then blocks until the client goes if follow is set.
func streamLines(srv grpc.ServerStreamingServer[common.Data], meta *common.Metadata, lines []string, follow bool) error {
	for _, l := range lines {
		if err := srv.Send(&common.Data{Metadata: meta, Bytes: []byte(l + "\n")}); err != nil {
			return err
		}
	}
	if follow {
		<-srv.Context().Done()
	}
	return nil
}

// Dmesg streams the node's journal of emulated kernel and boot messages.
func (m *machineServer) Dmesg(req *machine.DmesgRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	m.n.mu.Lock()
	lines := append([]string(nil), m.n.journal...)
	meta := m.meta()
	m.n.mu.Unlock()
	return streamLines(srv, meta, lines, req.GetFollow())
}

// Logs streams a service's log.
func (m *machineServer) Logs(req *machine.LogsRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	st := m.n.status()
	found := false
	for _, id := range serviceIDs(st.Role == "controlplane") {
		found = found || id == req.GetId()
	}
	if !found {
		return status.Errorf(codes.NotFound, "service %q not found", req.GetId())
	}
	lines := []string{
		fmt.Sprintf("%s %s: starting", m.n.em.cfg.Now().UTC().Format(time.RFC3339), req.GetId()),
		fmt.Sprintf("%s %s: running on talos %s", m.n.em.cfg.Now().UTC().Format(time.RFC3339), req.GetId(), st.Version),
	}
	return streamLines(srv, m.meta(), lines, req.GetFollow())
}

// Kubeconfig streams a .tar.gz holding an admin kubeconfig, once etcd is
// bootstrapped (as Talos, which needs the API server for it).
func (m *machineServer) Kubeconfig(_ *emptypb.Empty, srv grpc.ServerStreamingServer[common.Data]) error {
	n := m.n
	n.mu.Lock()
	cfg, st := n.cfg, n.st
	n.mu.Unlock()
	if st.Role != "controlplane" || cfg == nil {
		return status.Error(codes.FailedPrecondition, "kubeconfig is served by control planes only")
	}
	if !n.em.bootstrapped(st.ClusterID) {
		return status.Error(codes.FailedPrecondition, "the cluster is not bootstrapped")
	}
	kc, err := adminKubeconfig(cfg)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "kubeconfig", Mode: 0o600, Size: int64(len(kc)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(kc); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return srv.Send(&common.Data{Metadata: m.meta(), Bytes: buf.Bytes()})
}

// afterShutdownDelay runs f, the taking down of the node for an action it
// accepted, once the node has served for ShutdownDelay (at once without one).
func (n *node) afterShutdownDelay(f func()) {
	if d := n.em.cfg.ShutdownDelay; d > 0 {
		n.em.cfg.AfterFunc(d, f)
		return
	}
	go f()
}
