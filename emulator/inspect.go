package emulator

import (
	"context"
	"fmt"
	"strings"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	timeapi "github.com/siderolabs/talos/pkg/machinery/api/time"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The inspection calls of talosctl's everyday commands (memory, containers,
// time, read, disks), answered from the node's state: its role, its config,
// which of its services run.

// registerNodeServices adds the services beside MachineService and
// LifecycleService that a node serves.
func registerNodeServices(srv *grpc.Server, ms *machineServer) {
	timeapi.RegisterTimeServiceServer(srv, &timeServer{ms: ms})
	storage.RegisterStorageServiceServer(srv, &storageServer{ms: ms})
	machine.RegisterImageServiceServer(srv, &imageServer{ms: ms})
	clusterapi.RegisterClusterServiceServer(srv, &clusterServer{ms: ms})
}

// inspected is what the inspection calls read of a node, in one lock.
type inspected struct {
	st       NodeStatus
	cfg      config.Provider
	cfgBytes []byte
	bootID   string
	running  []serviceView
	// staticPodsStale: with the real control plane, its Kubernetes
	// components do not run at the config's version (yet).
	staticPodsStale bool
}

func (m *machineServer) inspect() inspected { return m.n.inspect() }

func (n *node) inspect() inspected {
	n.mu.Lock()
	in := inspected{st: n.st, cfg: n.cfg, cfgBytes: n.cfgBytes, bootID: n.bootID}
	n.mu.Unlock()
	if in.cfg != nil {
		if want, ok := versionFromImage(in.cfg.Cluster().APIServer().Image()); ok {
			if got, real := n.em.kube.controlPlaneVersion(in.st.Name); real && got != want {
				in.staticPodsStale = true
			}
			if in.st.Faults.kubernetesDown(want) {
				in.staticPodsStale = true
			}
		}
	}
	for _, v := range n.nodeServices() {
		if v.State == "Running" {
			in.running = append(in.running, v)
		}
	}
	return in
}

// memory is a node's /proc/meminfo in kB: 4 GiB for a control plane and 8 GiB
// for a worker, with 512 MiB used by the OS and 256 MiB by each running
// service container, so that what runs shows.
func (in inspected) memory() *machine.MemInfo {
	total := uint64(8 << 20)
	if in.st.Role == "controlplane" {
		total = 4 << 20
	}
	used := uint64(512<<10) + uint64(len(in.containers("system"))+len(in.containers(constants.K8sContainerdNamespace)))*(256<<10)
	free := total - used
	return &machine.MemInfo{
		Memtotal: total, Memfree: free * 3 / 4, Memavailable: free, Buffers: 64 << 10, Cached: free / 4,
		Active: used / 2, Inactive: used / 4, Shmem: 16 << 10, Slab: 96 << 10, Sreclaimable: 48 << 10, Sunreclaim: 48 << 10,
		Kernelstack: 8 << 10, Pagetables: 12 << 10, Commitlimit: total / 2, Committedas: used, Vmalloctotal: 34359738367,
		Hugepagesize: 2048, Directmap4K: 256 << 10, Directmap2M: total - 256<<10,
	}
}

// Memory reports the node's memory usage.
func (m *machineServer) Memory(context.Context, *emptypb.Empty) (*machine.MemoryResponse, error) {
	return &machine.MemoryResponse{Messages: []*machine.Memory{{Metadata: m.meta(), Meminfo: m.inspect().memory()}}}, nil
}

// containers lists what runs in one containerd namespace: in "system" the
// Talos services that are containers (apid, trustd, etcd and kubelet once
// running), in "k8s.io" the control plane's static pods (once etcd is up for
// the API server), each a sandbox and its container. Pods of DaemonSets and
// Deployments are not there: no Kubernetes API runs behind the nodes.
func (in inspected) containers(namespace string) []*machine.ContainerInfo {
	if in.cfg == nil {
		return nil
	}
	pidOf := func(id string) uint32 { return pid(in.st.Name, id) }
	var out []*machine.ContainerInfo
	switch namespace {
	case constants.SystemContainerdNamespace:
		for _, v := range in.running {
			var image string
			switch v.ID {
			case "apid", "trustd":
				image = "ghcr.io/siderolabs/" + v.ID + ":" + in.st.Version
			case "etcd":
				image = in.cfg.Cluster().Etcd().Image()
			case "kubelet":
				image = in.cfg.Machine().Kubelet().Image()
			default:
				continue
			}
			out = append(out, &machine.ContainerInfo{Namespace: namespace, Id: v.ID, PodId: v.ID, Name: v.ID, Image: image, Pid: pidOf(v.ID), Status: "RUNNING"})
		}
	case constants.K8sContainerdNamespace:
		for _, p := range staticPods(in) {
			sandbox := "kube-system/" + p.name + "-" + in.st.Name
			out = append(out,
				&machine.ContainerInfo{Namespace: namespace, Id: sandbox, PodId: sandbox, Name: sandbox, Image: pauseImage, Pid: pidOf(sandbox), Status: "SANDBOX_READY"},
				&machine.ContainerInfo{Namespace: namespace, Id: sandbox + ":" + p.name, PodId: sandbox, Name: p.name, Image: p.image, Pid: pidOf(p.name), Status: "CONTAINER_RUNNING"},
			)
		}
	}
	return out
}

// staticPod is one of the control plane's static pods.
type staticPod struct{ name, image string }

// staticPods are the static pods a node runs: the API server, controller
// manager and scheduler on a running control plane whose kubelet runs and
// whose cluster's etcd is up.
func staticPods(in inspected) []staticPod {
	if in.cfg == nil || in.st.Role != "controlplane" {
		return nil
	}
	var kubelet, etcd bool
	for _, v := range in.running {
		kubelet = kubelet || v.ID == "kubelet"
		etcd = etcd || v.ID == "etcd"
	}
	if !kubelet || !etcd || in.staticPodsStale {
		return nil
	}
	c := in.cfg.Cluster()
	return []staticPod{
		{"kube-apiserver", c.APIServer().Image()},
		{"kube-controller-manager", c.ControllerManager().Image()},
		{"kube-scheduler", c.Scheduler().Image()},
	}
}

// Containers lists the containers of a containerd namespace.
func (m *machineServer) Containers(_ context.Context, req *machine.ContainersRequest) (*machine.ContainersResponse, error) {
	ns := req.GetNamespace()
	if ns == "" {
		ns = constants.SystemContainerdNamespace
	}
	return &machine.ContainersResponse{Messages: []*machine.Container{{Metadata: m.meta(), Containers: m.inspect().containers(ns)}}}, nil
}

// pauseImage is the sandbox image of the pods kubelet runs (Talos's CRI default).
const pauseImage = "registry.k8s.io/pause:3.10"

// configPath is where Talos keeps the machine config.
const configPath = "/system/state/" + constants.ConfigFilename

// osRelease is Talos's /etc/os-release for a version.
func osRelease(version string) string {
	return fmt.Sprintf(`NAME="Talos"
ID=talos
VERSION_ID=%[1]s
PRETTY_NAME="Talos (%[1]s)"
HOME_URL="https://www.talos.dev/"
BUG_REPORT_URL="https://github.com/siderolabs/talos/issues"
VENDOR_NAME="Sidero Labs"
VENDOR_URL="https://www.siderolabs.com/"
`, version)
}

// meminfo renders a MemInfo as /proc/meminfo.
func meminfo(mi *machine.MemInfo) string {
	var b strings.Builder
	for _, f := range []struct {
		name string
		kb   uint64
	}{
		{"MemTotal", mi.Memtotal}, {"MemFree", mi.Memfree}, {"MemAvailable", mi.Memavailable}, {"Buffers", mi.Buffers},
		{"Cached", mi.Cached}, {"SwapCached", 0}, {"Active", mi.Active}, {"Inactive", mi.Inactive},
		{"SwapTotal", 0}, {"SwapFree", 0}, {"Shmem", mi.Shmem}, {"Slab", mi.Slab}, {"SReclaimable", mi.Sreclaimable},
		{"SUnreclaim", mi.Sunreclaim}, {"KernelStack", mi.Kernelstack}, {"PageTables", mi.Pagetables},
		{"CommitLimit", mi.Commitlimit}, {"Committed_AS", mi.Committedas},
	} {
		fmt.Fprintf(&b, "%-16s%8d kB\n", f.name+":", f.kb)
	}
	return b.String()
}

// file is the content of one of the files Read serves, from the node's state.
func (in inspected) file(path string) (string, bool) {
	switch path {
	case "/etc/os-release", "/usr/lib/os-release":
		return osRelease(in.st.Version), true
	case "/etc/hostname", "/proc/sys/kernel/hostname":
		return in.st.Name + "\n", true
	case "/proc/meminfo":
		return meminfo(in.memory()), true
	case "/proc/sys/kernel/random/boot_id":
		return in.bootID + "\n", true
	case configPath:
		return string(in.cfgBytes), true
	}
	return "", false
}

// Read streams one of a small set of files: /etc/os-release, /etc/hostname,
// /proc/meminfo, /proc/sys/kernel/random/boot_id (new on every boot, which
// `talosctl reboot --wait` compares) and the machine config.
func (m *machineServer) Read(req *machine.ReadRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	content, ok := m.inspect().file(req.GetPath())
	if !ok {
		return status.Errorf(codes.NotFound, "open %s: no such file or directory (the emulator serves a few files only)", req.GetPath())
	}
	return srv.Send(&common.Data{Metadata: m.meta(), Bytes: []byte(content)})
}

// timeServer is the TimeService: the node's clock (the emulator's) against
// its first time server, which the emulator does not ask: it reports no skew.
type timeServer struct {
	timeapi.UnimplementedTimeServiceServer

	ms *machineServer
}

func (t *timeServer) answer(server string) *timeapi.TimeResponse {
	if server == "" {
		server = constants.DefaultNTPServer
		t.ms.n.mu.Lock()
		if cfg := t.ms.n.cfg; cfg != nil && cfg.NetworkTimeSyncConfig() != nil && len(cfg.NetworkTimeSyncConfig().Servers()) > 0 {
			server = cfg.NetworkTimeSyncConfig().Servers()[0]
		}
		t.ms.n.mu.Unlock()
	}
	now := timestamppb.New(t.ms.n.em.cfg.Now())
	return &timeapi.TimeResponse{Messages: []*timeapi.Time{{Metadata: t.ms.meta(), Server: server, Localtime: now, Remotetime: now}}}
}

// Time reports the node's time and its time server's.
func (t *timeServer) Time(context.Context, *emptypb.Empty) (*timeapi.TimeResponse, error) {
	return t.answer(""), nil
}

// TimeCheck is Time against a server the caller names.
func (t *timeServer) TimeCheck(_ context.Context, req *timeapi.TimeRequest) (*timeapi.TimeResponse, error) {
	return t.answer(req.GetServer()), nil
}

// storageServer is the StorageService; Disks is what `talosctl reset --wait`
// asks a node in maintenance mode to know the reset is done.
type storageServer struct {
	storage.UnimplementedStorageServiceServer

	ms *machineServer
}

// Disks reports the node's one (emulated) disk, the system disk once installed.
func (s *storageServer) Disks(context.Context, *emptypb.Empty) (*storage.DisksResponse, error) {
	s.ms.n.mu.Lock()
	installed := s.ms.n.cfg != nil
	s.ms.n.mu.Unlock()
	disk := &storage.Disk{Size: 20 << 30, Model: "QEMU HARDDISK", DeviceName: "/dev/sda", Serial: "emulated-" + s.ms.n.st.Name,
		Type: storage.Disk_SSD, BusPath: "/pci0000:00/0000:00:07.0/virtio4/host0/target0:0:0/0:0:0:0", SystemDisk: installed, Subsystem: "/sys/class/block"}
	return &storage.DisksResponse{Messages: []*storage.Disks{{Metadata: s.ms.meta(), Disks: []*storage.Disk{disk}}}}, nil
}
