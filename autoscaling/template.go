package autoscaling

import (
	"context"
	"maps"

	protos "github.com/rezuscloud/rezuscloud/autoscaling/externalgrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// providerCapacity is a provider type's machine when the group names no
// capacity: the emulator's kubelet reports 4 CPUs, 8Gi, 110 pods and
// 100Gi of ephemeral storage (emulator/kubelet). A cloud's flavours are
// not known here: such a group declares its capacity to scale from zero.
var providerCapacity = map[string]map[string]string{
	"emulated": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"},
}

// NodeGroupTemplateNodeInfo is the Node a new machine of the group will
// be: its capacity (spec.autoscaling.capacity, else the provider type's),
// the group's labels and taints. Without a capacity it is Unimplemented,
// and the autoscaler takes a running Node of the group as the template.
func (s *Service) NodeGroupTemplateNodeInfo(ctx context.Context, req *protos.NodeGroupTemplateNodeInfoRequest) (*protos.NodeGroupTemplateNodeInfoResponse, error) {
	tenant, err := s.tenant(ctx)
	if err != nil {
		return nil, err
	}
	g, err := s.group(tenant, req.GetId())
	if err != nil {
		return nil, err
	}
	capacity := g.Spec.Autoscaling.Capacity
	if len(capacity) == 0 {
		p, ok, err := projections.Get[domain.Provider](s.cfg.Cache, domain.ObjectRef(domain.ProviderKind, "", g.Spec.Provider))
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		if ok {
			capacity = providerCapacity[p.Spec.Type]
		}
	}
	if len(capacity) == 0 {
		return nil, status.Errorf(codes.Unimplemented, "node group %s declares no spec.autoscaling.capacity", g.Metadata.Name)
	}
	node, err := TemplateNode(tenant, g, capacity)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	raw, err := node.Marshal() // Kubernetes' protobuf encoding: the bytes of the proto's Node field
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &protos.NodeGroupTemplateNodeInfoResponse{NodeInfo: raw}, nil
}

// TemplateNode builds the template Node of group g.
func TemplateNode(tenant string, g *domain.NodeGroup, capacity map[string]string) (*corev1.Node, error) {
	name := "template-" + g.Metadata.Name
	rl := corev1.ResourceList{}
	for k, v := range capacity {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, err
		}
		rl[corev1.ResourceName(k)] = q
	}
	labels := map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
	}
	maps.Copy(labels, g.Spec.Labels)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{ProviderID: domain.AutoscalerProviderID(tenant, name)},
		Status: corev1.NodeStatus{Capacity: rl, Allocatable: rl.DeepCopy(),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	for _, t := range g.Spec.Taints {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return node, nil
}
