// Package autoscaling serves the cluster-autoscaler's externalgrpc cloud
// provider protocol: the standard, unmodified autoscaler running in a
// tenant's cluster sizes that tenant's node groups that declare
// spec.autoscaling, on whatever infrastructure builds them. Each request
// carries a client certificate of one tenant (PKI), and sees and scales
// that tenant's groups only. A size change is a NodeGroup update in the
// event store, decided on the group's current spec
// (domain.DecideIncrease and the rest), which the apply worker then
// builds or destroys as any other change (a removed machine is drained
// first, PodDisruptionBudgets honoured).
package autoscaling

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	protos "github.com/rezuscloud/rezuscloud/autoscaling/externalgrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Actor is who the autoscaler's changes are recorded as:
// "system:autoscaler:<tenant>".
const Actor = "system:autoscaler"

// Config wires the service.
type Config struct {
	Cache *projections.Cache
	Store *eventstore.Store
	PKI   *PKI
	Now   func() time.Time
	Log   *slog.Logger
}

// Service is the externalgrpc CloudProvider service.
type Service struct {
	protos.UnimplementedCloudProviderServer
	cfg Config
}

// NewService returns the service.
func NewService(cfg Config) (*Service, error) {
	if cfg.Cache == nil || cfg.Store == nil || cfg.PKI == nil {
		return nil, errors.New("autoscaling: Cache, Store and PKI are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Service{cfg: cfg}, nil
}

// tenant is the tenant of the request's client certificate, which must be
// on record (not revoked).
func (s *Service) tenant(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", status.Error(codes.Unauthenticated, "a client certificate of RezusCloud's autoscaler CA is required")
	}
	leaf := info.State.VerifiedChains[0][0]
	tenant, err := s.cfg.PKI.tenantOf(ctx, leaf)
	if err != nil {
		s.cfg.Log.Warn("autoscaler: request refused", "serial", serialOf(leaf), "err", err)
		return "", status.Error(codes.PermissionDenied, err.Error())
	}
	return tenant, nil
}

func serialOf(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// groups are the tenant's node groups that autoscale, by name.
func (s *Service) groups(tenant string) (map[string]*domain.NodeGroup, error) {
	list, err := projections.List[domain.NodeGroup](s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := map[string]*domain.NodeGroup{}
	for i := range list {
		g := &list[i]
		if g.Spec.Autoscaling != nil && g.Metadata.DeletionTimestamp == nil {
			out[g.Metadata.Name] = g
		}
	}
	return out, nil
}

func (s *Service) group(tenant, id string) (*domain.NodeGroup, error) {
	gs, err := s.groups(tenant)
	if err != nil {
		return nil, err
	}
	g, ok := gs[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "tenant %s has no autoscaled node group %q", tenant, id)
	}
	return g, nil
}

func protoGroup(g *domain.NodeGroup) *protos.NodeGroup {
	a := g.Spec.Autoscaling
	return &protos.NodeGroup{Id: g.Metadata.Name, MinSize: int32(a.MinCount), MaxSize: int32(a.MaxCount),
		Debug: fmt.Sprintf("%s (target %d, %d..%d)", g.Metadata.Name, g.Spec.Count, a.MinCount, a.MaxCount)}
}

// NodeGroups lists the tenant's autoscaled groups.
func (s *Service) NodeGroups(ctx context.Context, _ *protos.NodeGroupsRequest) (*protos.NodeGroupsResponse, error) {
	tenant, err := s.tenant(ctx)
	if err != nil {
		return nil, err
	}
	gs, err := s.groups(tenant)
	if err != nil {
		return nil, err
	}
	out := &protos.NodeGroupsResponse{}
	for _, name := range slices.Sorted(maps.Keys(gs)) {
		out.NodeGroups = append(out.NodeGroups, protoGroup(gs[name]))
	}
	return out, nil
}

// machineOf finds the tenant's Machine a Node is: by its provider ID, or
// by its name (the machine's hostname or name).
func (s *Service) machineOf(tenant string, n *protos.ExternalGrpcNode) (*domain.Machine, error) {
	ms, err := s.built(tenant)
	if err != nil {
		return nil, err
	}
	name := n.GetName()
	if t, m, ok := domain.ParseAutoscalerProviderID(n.GetProviderID()); ok {
		if t != tenant {
			return nil, nil
		}
		name = m
	}
	if m, ok := ms[name]; ok {
		return m, nil
	}
	for _, m := range ms {
		if m.Spec.Hostname != "" && m.Spec.Hostname == name {
			return m, nil
		}
	}
	return nil, nil
}

// NodeGroupForNode names the autoscaled group of a Node; an empty id says
// the Node is of no autoscaled group (a control plane, a fixed group).
func (s *Service) NodeGroupForNode(ctx context.Context, req *protos.NodeGroupForNodeRequest) (*protos.NodeGroupForNodeResponse, error) {
	tenant, err := s.tenant(ctx)
	if err != nil {
		return nil, err
	}
	m, err := s.machineOf(tenant, req.GetNode())
	if err != nil {
		return nil, err
	}
	none := &protos.NodeGroupForNodeResponse{NodeGroup: &protos.NodeGroup{}}
	if m == nil {
		return none, nil
	}
	gs, err := s.groups(tenant)
	if err != nil {
		return nil, err
	}
	g, ok := gs[m.Spec.NodeGroup]
	if !ok {
		return none, nil
	}
	return &protos.NodeGroupForNodeResponse{NodeGroup: protoGroup(g)}, nil
}

// NodeGroupTargetSize is the group's count.
func (s *Service) NodeGroupTargetSize(ctx context.Context, req *protos.NodeGroupTargetSizeRequest) (*protos.NodeGroupTargetSizeResponse, error) {
	tenant, err := s.tenant(ctx)
	if err != nil {
		return nil, err
	}
	g, err := s.group(tenant, req.GetId())
	if err != nil {
		return nil, err
	}
	return &protos.NodeGroupTargetSizeResponse{TargetSize: int32(g.Spec.Count)}, nil
}

// NodeGroupIncreaseSize adds machines; beyond maxCount is an error.
func (s *Service) NodeGroupIncreaseSize(ctx context.Context, req *protos.NodeGroupIncreaseSizeRequest) (*protos.NodeGroupIncreaseSizeResponse, error) {
	tenant, err := s.tenant(ctx)
	if err != nil {
		return nil, err
	}
	err = s.change(ctx, tenant, req.GetId(), "increase", func(g *domain.NodeGroup) (domain.NodeGroupSpec, error) {
		return domain.DecideIncrease(g.Metadata.Name, g.Spec, int(req.GetDelta()))
	})
	if err != nil {
		return nil, err
	}
	return &protos.NodeGroupIncreaseSizeResponse{}, nil
}

// NodeGroupDeleteNodes removes exactly the named Nodes' machines.
func (s *Service) NodeGroupDeleteNodes(ctx context.Context, req *protos.NodeGroupDeleteNodesRequest) (*protos.NodeGroupDeleteNodesResponse, error) {
	tenant, err := s.tenant(ctx)
	if err != nil {
		return nil, err
	}
	g, err := s.group(tenant, req.GetId())
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range req.GetNodes() {
		m, err := s.machineOf(tenant, n)
		if err != nil {
			return nil, err
		}
		if m == nil {
			// A member whose machine failed to be built: the autoscaler
			// gives up on it by its instance ID (the provider ID we
			// reported), as it does after an apply failed.
			if pt, name, ok := domain.ParseAutoscalerProviderID(n.GetProviderID()); ok && pt == tenant &&
				slices.Contains(g.Spec.MachineNames(g.Metadata.Name), name) {
				names = append(names, name)
				continue
			}
			return nil, status.Errorf(codes.NotFound, "node %s (%s) is no machine of tenant %s", n.GetName(), n.GetProviderID(), tenant)
		}
		if m.Spec.NodeGroup != req.GetId() {
			return nil, status.Errorf(codes.InvalidArgument, "node %s is of node group %s, not %s", n.GetName(), m.Spec.NodeGroup, req.GetId())
		}
		names = append(names, m.Metadata.Name)
	}
	err = s.change(ctx, tenant, req.GetId(), "delete "+strings.Join(names, ","), func(g *domain.NodeGroup) (domain.NodeGroupSpec, error) {
		return domain.DecideDeleteNodes(g.Metadata.Name, g.Spec, names)
	})
	if err != nil {
		return nil, err
	}
	return &protos.NodeGroupDeleteNodesResponse{}, nil
}

// NodeGroupDecreaseTargetSize gives up machines not built yet.
func (s *Service) NodeGroupDecreaseTargetSize(ctx context.Context, req *protos.NodeGroupDecreaseTargetSizeRequest) (*protos.NodeGroupDecreaseTargetSizeResponse, error) {
	tenant, err := s.tenant(ctx)
	if err != nil {
		return nil, err
	}
	built, err := s.built(tenant)
	if err != nil {
		return nil, err
	}
	err = s.change(ctx, tenant, req.GetId(), "decrease", func(g *domain.NodeGroup) (domain.NodeGroupSpec, error) {
		return domain.DecideDecreaseTarget(g.Metadata.Name, g.Spec, int(req.GetDelta()), func(m string) bool { return built[m] != nil })
	})
	if err != nil {
		return nil, err
	}
	return &protos.NodeGroupDecreaseTargetSizeResponse{}, nil
}

// built are the tenant's Machine objects by name.
func (s *Service) built(tenant string) (map[string]*domain.Machine, error) {
	ms, err := projections.List[domain.Machine](s.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := map[string]*domain.Machine{}
	for i := range ms {
		if ms[i].Metadata.DeletionTimestamp == nil {
			out[ms[i].Metadata.Name] = &ms[i]
		}
	}
	return out, nil
}

// NodeGroupNodes lists the group's machines, creating, running or deleting.
func (s *Service) NodeGroupNodes(ctx context.Context, req *protos.NodeGroupNodesRequest) (*protos.NodeGroupNodesResponse, error) {
	tenant, err := s.tenant(ctx)
	if err != nil {
		return nil, err
	}
	g, err := s.group(tenant, req.GetId())
	if err != nil {
		return nil, err
	}
	built, err := s.built(tenant)
	if err != nil {
		return nil, err
	}
	var mine []string
	for name, m := range built {
		if m.Spec.NodeGroup == g.Metadata.Name {
			mine = append(mine, name)
		}
	}
	slices.Sort(mine)
	in := domain.InstancesInput{Tenant: tenant, Group: g.Metadata.Name, Spec: &g.Spec, Machines: mine,
		Ready: func(m string) bool { return built[m] != nil && built[m].Status.Ready }, ApplyError: s.applyError(tenant)}
	out := &protos.NodeGroupNodesResponse{}
	for _, inst := range domain.GroupInstances(in) {
		st := &protos.InstanceStatus{InstanceState: protos.InstanceStatus_InstanceState(inst.State)}
		if inst.ErrorCode != "" {
			st.ErrorInfo = &protos.InstanceErrorInfo{ErrorCode: inst.ErrorCode, ErrorMessage: inst.ErrorMessage, InstanceErrorClass: int32(inst.ErrorClass)}
		}
		out.Instances = append(out.Instances, &protos.Instance{Id: inst.ID, Status: st})
	}
	return out, nil
}

// applyError is the error of the tenant's newest apply when it failed
// (the group's missing machines wait for the next one); empty otherwise.
func (s *Service) applyError(tenant string) string {
	applies, err := projections.List[domain.Apply](s.cfg.Cache, domain.ApplyKind, projections.ListOptions{Tenant: tenant})
	if err != nil || len(applies) == 0 {
		return ""
	}
	newest := slices.MaxFunc(applies, func(a, b domain.Apply) int {
		return a.Metadata.CreationTimestamp.Compare(*b.Metadata.CreationTimestamp)
	})
	if newest.Status.Phase != domain.ApplyFailed {
		return ""
	}
	return newest.Status.Error
}

// Refresh has nothing to do: every answer reads the read model.
func (s *Service) Refresh(ctx context.Context, _ *protos.RefreshRequest) (*protos.RefreshResponse, error) {
	if _, err := s.tenant(ctx); err != nil {
		return nil, err
	}
	return &protos.RefreshResponse{}, nil
}

// Cleanup has nothing to do.
func (s *Service) Cleanup(ctx context.Context, _ *protos.CleanupRequest) (*protos.CleanupResponse, error) {
	if _, err := s.tenant(ctx); err != nil {
		return nil, err
	}
	return &protos.CleanupResponse{}, nil
}

// GPULabel is the label the autoscaler reads GPU types from.
func (s *Service) GPULabel(ctx context.Context, _ *protos.GPULabelRequest) (*protos.GPULabelResponse, error) {
	if _, err := s.tenant(ctx); err != nil {
		return nil, err
	}
	return &protos.GPULabelResponse{Label: "rezuscloud.io/gpu"}, nil
}

// GetAvailableGPUTypes: none known.
func (s *Service) GetAvailableGPUTypes(ctx context.Context, _ *protos.GetAvailableGPUTypesRequest) (*protos.GetAvailableGPUTypesResponse, error) {
	if _, err := s.tenant(ctx); err != nil {
		return nil, err
	}
	return &protos.GetAvailableGPUTypesResponse{}, nil
}

// change runs decide on the group's current spec in a store update (a
// conflicting write decides again), recorded as the autoscaler's.
func (s *Service) change(ctx context.Context, tenant, id, what string, decide func(g *domain.NodeGroup) (domain.NodeGroupSpec, error)) error {
	ref := domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: id}
	actor := Actor + ":" + tenant
	var before, after int
	_, err := s.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5}, func(state *domain.Object) ([]domain.Event, error) {
		notFound := status.Errorf(codes.NotFound, "tenant %s has no autoscaled node group %q", tenant, id)
		if state == nil || state.Terminating() {
			return nil, notFound
		}
		g := domain.NodeGroup{Metadata: state.Metadata}
		if err := json.Unmarshal(state.Spec, &g.Spec); err != nil {
			return nil, fmt.Errorf("reading node group %s: %w", id, err)
		}
		if g.Spec.Autoscaling == nil {
			return nil, notFound // not one the autoscaler sees
		}
		next, err := decide(&g)
		if err != nil {
			return nil, err
		}
		before, after = g.Spec.Count, next.Count
		obj := state.DeepCopy()
		if obj.Spec, err = json.Marshal(&next); err != nil {
			return nil, err
		}
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: obj, Actor: actor, Now: s.cfg.Now()})
	})
	if err != nil {
		return grpcError(err)
	}
	s.cfg.Log.Info("autoscaler: node group changed", "tenant", tenant, "nodeGroup", id, "request", what, "from", before, "to", after)
	return nil
}

// grpcError maps a refusal onto the code the autoscaler reads.
func grpcError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	var ae *domain.AutoscalerError
	if errors.As(err, &ae) {
		if ae.Precondition {
			return status.Error(codes.FailedPrecondition, ae.Message)
		}
		return status.Error(codes.InvalidArgument, ae.Message)
	}
	var de *domain.Error
	if errors.As(err, &de) {
		switch de.Reason {
		case domain.ReasonInvalid, domain.ReasonBadRequest:
			return status.Error(codes.InvalidArgument, de.Message)
		case domain.ReasonConflict:
			return status.Error(codes.Aborted, de.Message)
		case domain.ReasonNotFound:
			return status.Error(codes.NotFound, de.Message)
		case domain.ReasonServiceUnavailable:
			return status.Error(codes.Unavailable, de.Message)
		}
	}
	if eventstore.ClusterNotReady(err) {
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
