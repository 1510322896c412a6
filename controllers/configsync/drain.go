package configsync

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/kube/drain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// A config that would reboot its machine (the node's own dry run of mode
// AUTO says so) is applied only after the machine's Node is drained, as the
// upgrade saga drains: cordon, evict through the Eviction API with
// PodDisruptionBudgets honoured, within the group's drainTimeout. A drain
// that does not finish leaves the machine as it was (uncordoned, its config
// not applied, ConfigApplied False with reason DrainBlocked) and the tenant
// is retried with backoff. After the reboot the Node is uncordoned once the
// machine is back and its Node Ready.
//
// The Node carries LabelDrained while the controller holds it cordoned, so
// a pass after a restart (kill -9 between the reboot and the uncordon)
// finds it: a labelled Node whose machine holds its config and is Ready is
// uncordoned (sweepDrained).

// KubeSource gives a tenant's Kubernetes client (a *kubeclient.Clients).
type KubeSource = drain.Clients

// LabelDrained marks a Node the config controller cordoned for a config
// that reboots its machine.
const LabelDrained = "rezuscloud.io/drained-for-config"

// ReasonDrainBlocked is the ConfigApplied reason of a machine whose config
// was not applied because its drain did not finish.
const ReasonDrainBlocked = "DrainBlocked"

// sweepTimeout bounds the look for Nodes left cordoned.
const sweepTimeout = 5 * time.Second

// drains is how the controller drains machines: by each one's node group,
// in the tenant's cluster.
func (c *Controller) drains() drain.Machines {
	return drain.Machines{Kube: c.cfg.Kube, Group: projections.Lookup[domain.NodeGroup](c.cfg.Cache, domain.NodeGroupKind),
		Skip: c.cfg.DrainSkip, Poll: c.cfg.DrainPoll, Now: c.cfg.Now}
}

func (p *pass) label(ctx context.Context, d *drain.Drainer, node string, on bool) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, LabelDrained)
	if !on {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, LabelDrained)
	}
	_, err := d.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// drainBeforeReboot drains the machine when its config would reboot it. It
// answers the Drainer and Node to uncordon after the apply (nil when
// nothing was drained), and false when the config must not be applied now
// (the drain did not finish: recorded, the node uncordoned).
func (p *pass) drainBeforeReboot(ctx context.Context, it item) (*drain.Drainer, string, bool) {
	pol := p.c.drains().Policy(p.tenant, it.m, "")
	if !pol.Drain {
		return nil, "", true
	}
	dry, err := p.c.cfg.Nodes.ApplyConfigDryRun(ctx, p.bundle, it.m.Spec.Address, it.cfg)
	if err != nil || !dry.Reboot() {
		// A node that refuses the dry run refuses the apply too: the apply says why.
		return nil, "", true
	}
	node := drain.NodeName(it.m)
	d, err := p.c.drains().Drainer(ctx, p.tenant, nil)
	if err == nil {
		err = p.label(ctx, d, node, true)
		if apierrors.IsNotFound(err) {
			return nil, "", true // no Node: nothing runs there to drain
		}
	}
	if err == nil {
		p.record(p.c.rec.Pending(ctx, it.ref, "its config reboots it: draining its Node "+node))
		err = d.Drain(ctx, node, p.c.cfg.Now(), drain.Timeout(pol.Timeout))
	}
	switch {
	case err == nil:
		p.log.Info("config controller: drained before a rebooting config", "machine", it.m.Metadata.Name, "node", node)
		return d, node, true
	case errors.Is(err, drain.ErrNoNode):
		return nil, "", true
	case ctx.Err() != nil:
		return nil, "", false
	}
	why := err.Error()
	if d != nil {
		p.release(ctx, d, node)
		why += "; the node was uncordoned and its config not applied"
	}
	p.log.Warn("config controller: drain before a rebooting config failed", "machine", it.m.Metadata.Name, "reason", why)
	p.record(p.c.rec.Failed(ctx, it.ref, ReasonDrainBlocked, why))
	return nil, "", false
}

// release uncordons a Node the controller drained and drops its label.
func (p *pass) release(ctx context.Context, d *drain.Drainer, node string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.c.cfg.CallTimeout)
	defer cancel()
	if err := d.Uncordon(ctx, node); err != nil {
		p.log.Warn("config controller: uncordoning", "node", node, "err", err)
		return
	}
	if err := p.label(ctx, d, node, false); err != nil {
		p.log.Warn("config controller: unlabelling", "node", node, "err", err)
	}
}

// sweepDrained uncordons the Nodes the controller left cordoned (a pass cut
// short after the reboot) whose machines hold their config (not in
// pending) and are Ready.
func (p *pass) sweepDrained(ctx context.Context, machines []domain.Machine, pending map[string]bool) {
	if p.c.cfg.Kube == nil || len(machines) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	d := p.sweepDrainer(ctx)
	if d == nil {
		return
	}
	nodes, err := d.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelDrained})
	if err != nil || len(nodes.Items) == 0 {
		return
	}
	byNode := map[string]*domain.Machine{}
	for i := range machines {
		byNode[drain.NodeName(&machines[i])] = &machines[i]
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		m := byNode[n.Name]
		if m == nil || pending[m.Metadata.Name] {
			continue
		}
		if ok, _ := drain.Ready(n); !ok {
			continue
		}
		p.log.Info("config controller: uncordoning a node drained by an earlier pass", "node", n.Name, "machine", m.Metadata.Name)
		p.release(ctx, d, n.Name)
	}
}

// sweepDrainer is the tenant's cluster for a sweep of its Nodes; nil when
// drains are skipped for the tenant (no Kubernetes API) or it cannot be
// reached.
func (p *pass) sweepDrainer(ctx context.Context) *drain.Drainer {
	if skip := p.c.cfg.DrainSkip; skip != nil && skip(&domain.NodeGroup{Metadata: domain.ObjectMeta{Tenant: p.tenant}}) != "" {
		return nil
	}
	d, err := p.c.drains().Drainer(ctx, p.tenant, nil)
	if err != nil {
		return nil
	}
	return d
}
