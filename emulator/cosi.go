package emulator

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	v1alpha1api "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A configured node serves the COSI resource API (cosi.resource.State), as
// machined does, through the COSI runtime's own protobuf state server over an
// in-memory state with Talos machinery's resource definitions: `talosctl get`
// (with --watch), Omni and RezusCloud's own status reads use it. The state
// lives for one boot (a reboot starts a new one, as machined's does) and is
// kept current by refreshCOSI, which derives every resource from the node's
// status and config and writes only what changed, so a watch sees each change
// once. It is read-only to clients, like the resources controllers own.

// cosiResources are the resource kinds an emulated node serves; `talosctl get
// rd` lists exactly these.
var cosiResources = []meta.ResourceWithRD{
	&cluster.Member{}, &config.MachineConfig{}, &etcd.Member{}, &k8s.Nodename{}, &k8s.StaticPodStatus{},
	&network.AddressStatus{}, &network.HostnameStatus{}, &network.NodeAddress{},
	&runtime.ExtensionStatus{}, &runtime.MachineStatus{}, &runtime.Version{}, &v1alpha1.Service{},
	// What `talosctl health` reads (cluster_health_resources.go).
	&k8s.BootstrapManifestsConfig{}, &block.VolumeStatus{}, &runtime.Diagnostic{},
}

// cosiNamespaces are the namespaces of cosiResources, with Talos's descriptions.
var cosiNamespaces = []struct {
	name        resource.Namespace
	description string
}{
	{v1alpha1.NamespaceName, "Talos v1alpha1 subsystems glue resources."},
	{cluster.NamespaceName, "Cluster configuration and discovery resources."},
	{config.NamespaceName, "Talos node configuration."},
	{etcd.NamespaceName, "etcd resources."},
	{k8s.NamespaceName, "Kubernetes all node types resources."},
	{k8s.ControlPlaneNamespaceName, "Kubernetes control plane resources."},
	{network.NamespaceName, "Networking resources."},
}

// nodeState is one boot's COSI state. It is made by the boot's first COSI
// call, not at boot: a node nobody asks (the 500 nodes of a benchmark, most
// nodes of a test) costs nothing, and a change refreshes only the nodes of
// its cluster that have a state.
type nodeState struct {
	st     state.State
	srv    *server.State
	synced sync.Once  // the first sync, which every first call waits for
	mu     sync.Mutex // serialises refreshes so an older one cannot write last
}

// cosiServer serves the COSI State API of one boot of a node, making its
// state on the first call. Create, Update and Destroy stay unimplemented:
// clients only read what the node's "controllers" own.
type cosiServer struct {
	v1alpha1api.UnimplementedStateServer

	n *node
}

// state returns the boot's COSI state, made and synced on first use.
func (c *cosiServer) state() (*server.State, error) {
	n := c.n
	n.mu.Lock()
	s := n.cosi
	if s == nil {
		var err error
		if s, err = newNodeState(); err != nil {
			n.mu.Unlock()
			return nil, status.Errorf(codes.Internal, "making the COSI state: %v", err)
		}
		n.cosi = s
	}
	n.mu.Unlock()
	s.synced.Do(n.syncCOSI)
	return s.srv, nil
}

// Get reads one resource.
func (c *cosiServer) Get(ctx context.Context, req *v1alpha1api.GetRequest) (*v1alpha1api.GetResponse, error) {
	srv, err := c.state()
	if err != nil {
		return nil, err
	}
	return srv.Get(ctx, req)
}

// List lists the resources of a kind.
func (c *cosiServer) List(req *v1alpha1api.ListRequest, stream grpc.ServerStreamingServer[v1alpha1api.ListResponse]) error {
	srv, err := c.state()
	if err != nil {
		return err
	}
	return srv.List(req, stream)
}

// Watch watches a resource or a kind.
func (c *cosiServer) Watch(req *v1alpha1api.WatchRequest, stream grpc.ServerStreamingServer[v1alpha1api.WatchResponse]) error {
	srv, err := c.state()
	if err != nil {
		return err
	}
	return srv.Watch(req, stream)
}

// cosiHistory builds each node's in-memory COSI collections with a small
// watch history that grows on demand: COSI's default (100 entries made at
// once, for every resource type of every namespace) was 105 KiB a node, 72 %
// of a 3,000-node emulator's heap in the 1,000-tenant fleet run.
var cosiHistory = inmem.NewStateWithOptions(inmem.WithHistoryInitialCapacity(8), inmem.WithHistoryMaxCapacity(100), inmem.WithHistoryGap(2))

func newNodeState() (*nodeState, error) {
	st := state.WrapCore(namespaced.NewState(func(ns resource.Namespace) state.CoreState { return cosiHistory(ns) }))
	ctx := context.Background()
	nsr, rr := registry.NewNamespaceRegistry(st), registry.NewResourceRegistry(st)
	if err := nsr.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("registering COSI namespaces: %w", err)
	}
	if err := rr.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("registering COSI resources: %w", err)
	}
	for _, ns := range cosiNamespaces {
		if err := nsr.Register(ctx, ns.name, ns.description); err != nil {
			return nil, fmt.Errorf("registering COSI namespace %s: %w", ns.name, err)
		}
	}
	for _, r := range cosiResources {
		if err := rr.Register(ctx, r); err != nil {
			return nil, fmt.Errorf("registering COSI resource: %w", err)
		}
	}
	s := &nodeState{st: st}
	s.srv = s.server()
	return s, nil
}

// sensitive are the resource types only os:admin may read, as in Talos.
var sensitive = func() map[resource.Type]bool {
	m := map[resource.Type]bool{}
	for _, r := range cosiResources {
		if rd := r.ResourceDefinition(); rd.Sensitivity == meta.Sensitive {
			m[rd.Type] = true
		}
	}
	return m
}()

// server is the gRPC State service over a read-only view of the state.
func (s *nodeState) server() *server.State {
	return server.NewState(state.Filter(s.st, func(ctx context.Context, access state.Access) error {
		if !access.Verb.Readonly() {
			return status.Errorf(codes.PermissionDenied, "%s is read-only on an emulated node", access.ResourceType)
		}
		if sensitive[access.ResourceType] {
			roles, err := callerRoles(ctx)
			if err != nil {
				return err
			}
			if !roles.Includes(role.Admin) {
				return status.Errorf(codes.PermissionDenied, "reading %s needs the os:admin role", access.ResourceType)
			}
		}
		return nil
	}))
}

// memberFacts are what a node's member shows the rest of its cluster.
type memberFacts struct{ role, cluster, version, address string }

// nodeFacts is what the resources of a node are derived from, read in one go.
type nodeFacts struct {
	st       NodeStatus
	cfg      inspected
	services []serviceView
	members  []NodeStatus // the cluster's configured nodes (discovery)
	etcd     bool         // this node is a running etcd member
	etcdID   uint64       // its member id
	// extensions are the system extensions of the image it runs.
	extensions []extensionFact
	times      bootTimes
}

// refreshCOSI brings the COSI resources of n, and of the other nodes of its
// cluster (their discovery members and etcd views change with it), up to
// date. It runs on its own goroutine, coalescing bursts, because it takes the
// emulator's lock, which callers may hold.
func (e *Emulator) refreshCOSI(n *node) {
	if !n.cosiPending.CompareAndSwap(false, true) {
		return
	}
	go func() {
		n.cosiPending.Store(false)
		n.mu.Lock()
		st, seen := n.st, n.cosiSeen
		now := memberFacts{st.Role, st.ClusterID, st.Version, st.Address}
		n.cosiSeen = now
		n.mu.Unlock()
		n.syncCOSI()
		// The other nodes of its cluster, and of the cluster it left (a
		// reset): a control plane's change (etcd) syncs the other control
		// planes whole; a change of what its member shows updates that
		// member everywhere. Nothing else does, so a change costs at most
		// O(cluster), not O(cluster²).
		cpChanged := st.Role == "controlplane" || seen.role == "controlplane"
		memberChanged := now != seen
		if !cpChanged && !memberChanged {
			return
		}
		for _, m := range e.clusterNodes(n, st.ClusterID, seen.cluster)[1:] {
			ms := m.status()
			switch {
			case cpChanged && ms.Role == "controlplane":
				m.syncCOSI()
			case memberChanged:
				m.syncMember(n)
			}
		}
	}()
}

// clusterNodes returns n and the other nodes of the clusters named.
func (e *Emulator) clusterNodes(n *node, clusterIDs ...string) []*node {
	out := []*node{n}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.nodes {
		if m == n {
			continue
		}
		m.mu.Lock()
		id := m.st.ClusterID
		m.mu.Unlock()
		if id != "" && slices.Contains(clusterIDs, id) {
			out = append(out, m)
		}
	}
	return out
}

// facts reads what n's resources are made of.
func (n *node) facts() (nodeFacts, *nodeState) {
	in := n.inspect()
	n.mu.Lock()
	s, t := n.cosi, n.boot
	n.mu.Unlock()
	f := nodeFacts{st: in.st, cfg: in, services: n.nodeServices(), times: t, extensions: n.em.extensionsOf(in.st.Image)}
	if s == nil || in.st.ClusterID == "" {
		return f, s
	}
	for _, m := range n.em.clusterNodes(n, in.st.ClusterID) {
		if st := m.status(); st.Role != "" {
			f.members = append(f.members, st)
		}
	}
	for _, v := range f.services {
		f.etcd = f.etcd || v.ID == "etcd" && v.State == "Running"
	}
	f.etcdID = memberID(in.st.Name)
	if id, ok := n.em.kube.memberID(in.st.Name); ok {
		f.etcdID = id // the real etcd's
	}
	return f, s
}

// syncCOSI writes n's resources as its facts make them.
//
// The facts are read under the state's lock: two syncs of one node (the
// refresh of one change racing the next's) then write in the order they
// read, so the last write is of the latest facts. Read before the lock, an
// older sync could write after a newer one and leave the resources stale
// with nothing to refresh them (a node upgraded under load kept its
// services "not running" while it ran them).
func (n *node) syncCOSI() {
	n.mu.Lock()
	s := n.cosi
	n.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, cur := n.facts()
	if cur != s {
		return // rebooted meanwhile: the new boot's state is synced by its own first use
	}
	if err := s.apply(context.Background(), desiredResources(f)); err != nil {
		n.em.cfg.Logf("node %s: updating COSI resources: %v", f.st.Name, err)
	}
}

// syncMember updates only the member of another node (of) in n's state:
// created or updated while of is a configured node of n's cluster, else
// (reset, or deleted from the emulator) destroyed. Both nodes are read under
// the state's lock, as syncCOSI reads its facts: of's refreshes racing each
// other (two changes in a row) then write in the order they read, and the
// last write is of of as it is now.
func (n *node) syncMember(of *node) {
	n.mu.Lock()
	s := n.cosi
	n.mu.Unlock()
	if s == nil {
		return
	}
	ctx := context.Background()
	s.mu.Lock()
	defer s.mu.Unlock()
	st, clusterID := of.status(), n.status().ClusterID
	n.em.mu.Lock()
	live := n.em.nodes[st.Name] == of
	n.em.mu.Unlock()
	var err error
	if live && st.Role != "" && clusterID != "" && st.ClusterID == clusterID {
		err = s.upsert(ctx, memberResource(st))
	} else if err = s.st.Destroy(ctx, cluster.NewMember(cluster.NamespaceName, st.Name).Metadata()); state.IsNotFoundError(err) {
		err = nil
	}
	if err != nil {
		n.em.cfg.Logf("node %s: updating the member %s: %v", n.status().Name, st.Name, err)
	}
}

// upsert creates r, or updates it when its spec changed.
func (s *nodeState) upsert(ctx context.Context, r resource.Resource) error {
	md := r.Metadata()
	cur, err := s.st.Get(ctx, md)
	switch {
	case state.IsNotFoundError(err):
		return s.st.Create(ctx, r)
	case err != nil:
		return err
	}
	if same, err := sameSpec(cur, r); err != nil || same {
		return err
	}
	md.SetVersion(cur.Metadata().Version())
	return s.st.Update(ctx, r)
}

// apply makes the state hold exactly want for each kind in cosiResources:
// creating, updating (only when the spec changed) and destroying resources.
func (s *nodeState) apply(ctx context.Context, want []resource.Resource) error {
	keep := map[string]bool{}
	for _, r := range want {
		md := r.Metadata()
		keep[md.Namespace()+"/"+md.Type()+"/"+md.ID()] = true
		if err := s.upsert(ctx, r); err != nil {
			return err
		}
	}
	return s.each(ctx, func(r resource.Resource) error {
		md := r.Metadata()
		if keep[md.Namespace()+"/"+md.Type()+"/"+md.ID()] {
			return nil
		}
		if err := s.st.Destroy(ctx, md); err != nil && !state.IsNotFoundError(err) {
			return err
		}
		return nil
	})
}

// each calls fn for every resource of the kinds in cosiResources.
func (s *nodeState) each(ctx context.Context, fn func(resource.Resource) error) error {
	for _, kind := range cosiResources {
		rd := kind.ResourceDefinition()
		list, err := s.st.List(ctx, resource.NewMetadata(rd.DefaultNamespace, rd.Type, "", resource.VersionUndefined))
		if err != nil {
			return err
		}
		for _, r := range list.Items {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

func sameSpec(a, b resource.Resource) (bool, error) {
	ya, err := yaml.Marshal(a.Spec())
	if err != nil {
		return false, err
	}
	yb, err := yaml.Marshal(b.Spec())
	if err != nil {
		return false, err
	}
	return bytes.Equal(ya, yb), nil
}
