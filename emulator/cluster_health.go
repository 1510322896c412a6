package emulator

// The ClusterService of a control plane: `talosctl health` runs Talos's own
// cluster checks (github.com/siderolabs/talos/pkg/cluster/check) on the node
// it asks, as machined's HealthCheck does, against the node's Talos API and
// its cluster's real kube-apiserver.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/gen/xslices"
	"github.com/siderolabs/talos/pkg/cluster"
	"github.com/siderolabs/talos/pkg/cluster/check"
	"github.com/siderolabs/talos/pkg/conditions"
	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	clusterres "github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clusterServer is one boot's ClusterService.
type clusterServer struct {
	clusterapi.UnimplementedClusterServiceServer

	ms *machineServer
}

// HealthCheck runs check.DefaultClusterChecks over the nodes the request
// names, else over the members discovery shows (the cluster's configured
// nodes), streaming each condition it waits for, until they all pass or
// the request's wait timeout ends. As in Talos, only a control plane
// answers it (it holds the OS CA key the checks' client certificate needs).
func (c *clusterServer) HealthCheck(req *clusterapi.HealthCheckRequest, srv clusterapi.ClusterService_HealthCheckServer) error {
	n := c.ms.n
	n.mu.Lock()
	cfg, st := n.cfg, n.st
	n.mu.Unlock()
	if cfg == nil || !cfg.Machine().Type().IsControlPlane() {
		return status.Error(codes.Unimplemented, "cluster health check is only available on control plane nodes")
	}
	roles, err := callerRoles(srv.Context())
	if err != nil {
		return err
	}
	clients := newHealthClients(n.em, st, cfg, roles)
	defer clients.Close() //nolint:errcheck // the connections are ours alone.
	k8s := &cluster.KubernetesClient{ClientProvider: clients, ForceEndpoint: req.GetClusterInfo().GetForceEndpoint()}
	defer k8s.K8sClose() //nolint:errcheck

	ctx, cancel := context.WithTimeout(srv.Context(), req.GetWaitTimeout().AsDuration())
	defer cancel()
	info, err := c.clusterInfo(req, st)
	if err != nil {
		return err
	}
	state := struct {
		cluster.ClientProvider
		cluster.K8sProvider
		cluster.Info
	}{clients, k8s, info}
	ips := xslices.Map(info.Nodes(), func(i cluster.NodeInfo) string { return i.InternalIP.String() })
	if err := srv.Send(&clusterapi.HealthCheckProgress{Message: fmt.Sprintf("discovered nodes: %q", ips)}); err != nil {
		return err
	}
	return check.Wait(ctx, &state, append(check.DefaultClusterChecks(), check.ExtraClusterChecks()...), &healthReporter{srv: srv})
}

// clusterInfo is the nodes to check: those the request names, else the
// cluster's members as the discovery service shows them (cosi.go).
func (c *clusterServer) clusterInfo(req *clusterapi.HealthCheckRequest, st NodeStatus) (cluster.Info, error) {
	cps, workers := req.GetClusterInfo().GetControlPlaneNodes(), req.GetClusterInfo().GetWorkerNodes()
	if len(cps) > 0 || len(workers) > 0 {
		cpInfos, err := cluster.IPsToNodeInfos(cps)
		if err != nil {
			return nil, err
		}
		workerInfos, err := cluster.IPsToNodeInfos(workers)
		if err != nil {
			return nil, err
		}
		return &nodeList{byType: map[machine.Type][]cluster.NodeInfo{
			machine.TypeControlPlane: cpInfos, machine.TypeWorker: workerInfos,
		}}, nil
	}
	var members []*clusterres.Member
	for _, m := range c.ms.n.em.List() {
		if m.ClusterID == st.ClusterID && m.Role != "" {
			members = append(members, memberResource(m))
		}
	}
	return check.NewDiscoveredClusterInfo(members)
}

// nodeList is an explicit list of nodes by type.
type nodeList struct {
	byType map[machine.Type][]cluster.NodeInfo
}

func (l *nodeList) Nodes() []cluster.NodeInfo {
	return slices.Concat(l.byType[machine.TypeInit], l.byType[machine.TypeControlPlane], l.byType[machine.TypeWorker])
}

func (l *nodeList) NodesByType(t machine.Type) []cluster.NodeInfo { return l.byType[t] }

// healthReporter streams each condition's state once per change, as
// machined's does: "waiting for <check>: <its last error>" or "… OK".
type healthReporter struct {
	srv      clusterapi.ClusterService_HealthCheckServer
	lastLine string
}

func (r *healthReporter) Update(c conditions.Condition) {
	line := strings.TrimSpace(fmt.Sprintf("waiting for %s", c))
	if line != r.lastLine {
		_ = r.srv.Send(&clusterapi.HealthCheckProgress{Message: line}) //nolint:errcheck // the stream's end shows in Wait.
		r.lastLine = line
	}
}
