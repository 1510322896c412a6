package talos

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// Where RezusCloud verifies a node's state it reads the node's COSI
// resources, as Omni does: they are what Talos's controllers hold, the same
// facts `talosctl get` shows, rather than the answers of the older
// MachineService calls. These are the reads, over a client's COSI state.

// NodeVersion is the Talos version the node runs, from its runtime.Version.
func NodeVersion(ctx context.Context, c *client.Client) (string, error) {
	v, err := safe.StateGet[*runtime.Version](ctx, c.COSI, runtime.NewVersion().Metadata())
	if err != nil {
		return "", fmt.Errorf("reading the node's version: %w", err)
	}
	return v.TypedSpec().Version, nil
}

// NodeExtensions are the system extensions a node runs, as its COSI
// ExtensionStatus resources say (`talosctl get extensions`), and the Image
// Factory schematic its image was built from: the version of the factory's
// "schematic" extension ("" for an image the factory did not build).
func NodeExtensions(ctx context.Context, c *client.Client) (extensions []string, schematic string, err error) {
	list, err := safe.StateListAll[*runtime.ExtensionStatus](ctx, c.COSI)
	if err != nil {
		return nil, "", fmt.Errorf("reading the node's extensions: %w", err)
	}
	for r := range list.All() {
		md := r.TypedSpec().Metadata
		if md.Name == "schematic" {
			schematic = md.Version
			continue
		}
		extensions = append(extensions, md.Name)
	}
	return extensions, schematic, nil
}

// ServiceState is one service as its v1alpha1.Service resource says.
type ServiceState struct {
	ID                        string
	Running, Healthy, Unknown bool
}

// Problem says what is wrong with the service ("" when it runs healthy).
func (s ServiceState) Problem() string {
	switch {
	case !s.Running:
		return "not running"
	case s.Unknown:
		return "of unknown health"
	case !s.Healthy:
		return "unhealthy"
	}
	return ""
}

// NodeServices lists the node's services, by id, from its v1alpha1.Service resources.
func NodeServices(ctx context.Context, c *client.Client) ([]ServiceState, error) {
	list, err := safe.StateListAll[*v1alpha1.Service](ctx, c.COSI)
	if err != nil {
		return nil, fmt.Errorf("listing the node's services: %w", err)
	}
	var out []ServiceState
	for s := range list.All() {
		spec := s.TypedSpec()
		out = append(out, ServiceState{ID: s.Metadata().ID(), Running: spec.Running, Healthy: spec.Healthy, Unknown: spec.Unknown})
	}
	slices.SortFunc(out, func(a, b ServiceState) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ServicesProblem says which services do not run healthy ("" when all do).
func ServicesProblem(svcs []ServiceState) string {
	var bad []string
	for _, s := range svcs {
		if p := s.Problem(); p != "" {
			bad = append(bad, s.ID+" ("+p+")")
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return "services not healthy: " + strings.Join(bad, ", ")
}

// LocalEtcdMemberID is the id of the node's own etcd member, from its
// etcd.Member resource ("local"); NotFound (state.IsNotFoundError) when the
// node runs no etcd member.
func LocalEtcdMemberID(ctx context.Context, c *client.Client) (uint64, error) {
	m, err := safe.StateGet[*etcd.Member](ctx, c.COSI, etcd.NewMember(etcd.NamespaceName, etcd.LocalMemberID).Metadata())
	if err != nil {
		return 0, err
	}
	id, err := etcd.ParseMemberID(m.TypedSpec().MemberID)
	if err != nil {
		return 0, fmt.Errorf("the node's etcd member id %q: %w", m.TypedSpec().MemberID, err)
	}
	return id, nil
}

// StaticPodImages are the images the containers of the node's static pods
// run, by container name (kube-apiserver, …), from the kubelet's view in its
// k8s.StaticPodStatus resources. Pods are named after the Kubernetes node
// (kube-system/kube-apiserver-<nodename>), which need not be the machine's
// name, so their containers name them.
func StaticPodImages(ctx context.Context, c *client.Client) (map[string][]string, error) {
	list, err := safe.StateListAll[*k8s.StaticPodStatus](ctx, c.COSI)
	if err != nil {
		return nil, fmt.Errorf("listing the node's static pods: %w", err)
	}
	out := map[string][]string{}
	for p := range list.All() {
		cs, _ := p.TypedSpec().PodStatus["containerStatuses"].([]any)
		for _, c := range cs {
			m, _ := c.(map[string]any)
			name, _ := m["name"].(string)
			if img, ok := m["image"].(string); ok && name != "" {
				out[name] = append(out[name], img)
			}
		}
	}
	return out, nil
}
