package configsync

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/kube/drain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// The cluster-autoscaler matches its cloud provider's instances to Nodes by
// provider ID. A machine of an autoscaled group registers its Node with
// one (kubelet --provider-id, from its config), but a Node registered
// before its group autoscaled has none, and the kubelet never adds one to
// a Node that exists. Unmatched, the autoscaler takes the instance for a
// machine that never registered and, after --max-node-provision-time,
// deletes it: a running machine. Kubernetes lets a Node's spec.providerID
// go from empty to a value once, so the config pass sets it
// (sweepProviderIDs).

// providerIDPatches names, by Node, the provider ID to set: Nodes of
// machines in autoscaled groups that have none. A Node with another
// provider ID is left alone (Kubernetes refuses to change it).
func providerIDPatches(tenant string, machines []domain.Machine, autoscaled func(group string) bool, nodes []corev1.Node) map[string]string {
	want := map[string]string{}
	for i := range machines {
		m := &machines[i]
		if m.Metadata.DeletionTimestamp == nil && autoscaled(m.Spec.NodeGroup) {
			want[drain.NodeName(m)] = domain.AutoscalerProviderID(tenant, m.Metadata.Name)
		}
	}
	out := map[string]string{}
	for i := range nodes {
		if id, ok := want[nodes[i].Name]; ok && nodes[i].Spec.ProviderID == "" {
			out[nodes[i].Name] = id
		}
	}
	return out
}

// sweepProviderIDs sets the provider ID of the Nodes of autoscaled groups
// that registered without one. Best effort: a cluster that does not answer
// is tried on the next pass.
func (p *pass) sweepProviderIDs(ctx context.Context, machines []domain.Machine) {
	if p.c.cfg.Kube == nil || len(machines) == 0 {
		return
	}
	group := projections.Lookup[domain.NodeGroup](p.c.cfg.Cache, domain.NodeGroupKind)
	autoscaled := func(name string) bool {
		g, ok := group(p.tenant, name)
		return ok && g.Spec.Autoscaling != nil
	}
	some := false
	for i := range machines {
		some = some || autoscaled(machines[i].Spec.NodeGroup)
	}
	if !some {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	d := p.sweepDrainer(ctx)
	if d == nil {
		return
	}
	nodes, err := d.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for node, id := range providerIDPatches(p.tenant, machines, autoscaled, nodes.Items) {
		patch := fmt.Sprintf(`{"spec":{"providerID":%q}}`, id)
		if _, err := d.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			p.log.Warn("config controller: setting a Node's provider ID for the autoscaler", "node", node, "providerID", id, "err", err)
			continue
		}
		p.log.Info("config controller: set a Node's provider ID for the autoscaler", "node", node, "providerID", id)
	}
}
