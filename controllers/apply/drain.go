package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/kube/drain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// Before a machine is destroyed or reset, its pods leave it: every going
// machine's Node is cordoned first (so a pod evicted from one does not land
// on the next), then each is drained in turn through the Eviction API,
// PodDisruptionBudgets honoured, within its group's drainTimeout. A drain
// that does not finish fails the run before anything is destroyed, and the
// going Nodes are made schedulable again. After tofu has destroyed the
// machines, their Nodes are deleted. A run cut short (the server killed
// mid-drain) is run again from its start: the cordons are still there and
// the drain goes on where the pods are.

// KubeSource gives a tenant's Kubernetes client (a *kubeclient.Clients).
type KubeSource = drain.Clients

// errDrainBlocked marks a run stopped because a going machine's drain did
// not finish.
var errDrainBlocked = errors.New("drain blocked")

// nodeDeleteWait bounds the retries of deleting a gone machine's Node.
const nodeDeleteWait = 30 * time.Second

// drains is how the worker drains machines: by each one's node group, in
// the tenant's cluster.
func (w *Worker) drains() drain.Machines {
	return drain.Machines{Kube: w.cfg.Kube, Group: projections.Lookup[domain.NodeGroup](w.cfg.Cache, domain.NodeGroupKind),
		Skip: w.cfg.DrainSkip, Poll: w.cfg.DrainPoll, Now: w.cfg.Now}
}

// drainGoing cordons and drains the going machines that drain; it answers
// an error wrapping errDrainBlocked when one does not finish, after making
// every going Node schedulable again.
func (w *Worker) drainGoing(ctx context.Context, tenant string, going []domain.Machine, logw *tofu.LogWriter) error {
	type target struct {
		m    domain.Machine
		node string
		pol  drain.Policy
	}
	if w.cfg.Kube == nil {
		return nil
	}
	var targets []target
	for _, m := range going {
		pol := w.drains().Policy(tenant, &m, "")
		if !pol.Drain {
			logw.Printf("scale-down: %s is not drained: %s", m.Metadata.Name, pol.Why)
			continue
		}
		targets = append(targets, target{m: m, node: drain.NodeName(&m), pol: pol})
	}
	if len(targets) == 0 {
		return nil
	}
	slices.SortFunc(targets, func(a, b target) int {
		// Workers first: a control plane's own pods may need them.
		if ra, rb := a.m.Spec.Role == domain.RoleControlPlane, b.m.Spec.Role == domain.RoleControlPlane; ra != rb {
			if ra {
				return 1
			}
			return -1
		}
		return strings.Compare(a.m.Metadata.Name, b.m.Metadata.Name)
	})
	d, err := w.drains().Drainer(ctx, tenant, nil)
	if err != nil {
		return fmt.Errorf("%w: reaching the tenant's Kubernetes API: %v; nothing was destroyed", errDrainBlocked, err)
	}
	uncordon := func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, t := range targets {
			if err := d.Uncordon(uctx, t.node); err != nil {
				logw.Printf("scale-down: uncordoning %s: %v", t.node, err)
			}
		}
	}
	now := time.Now
	if w.cfg.Now != nil {
		now = w.cfg.Now
	}
	// Cordon them all first; a Node that is not registered has nothing to drain.
	var names []string
	for _, t := range targets {
		names = append(names, t.node)
		if err := d.Cordon(ctx, t.node); err != nil && !errors.Is(err, drain.ErrNoNode) {
			logw.Printf("scale-down: cordoning %s: %v (the drain retries it)", t.node, err)
		}
	}
	logw.Printf("scale-down: cordoned %v; draining them one at a time", names)
	for _, t := range targets {
		name := t.m.Metadata.Name
		began := time.Now()
		last := -1
		d.Progress = func(left int) {
			if left != last {
				last = left
				logw.Printf("scale-down: %s: %s", name, drain.Progress(left))
			}
		}
		d.KubeletAway = kubeletAway(&t.m)
		// Each machine's drainTimeout counts from its own drain's start.
		err := d.Drain(ctx, t.node, now(), drain.Timeout(t.pol.Timeout))
		switch {
		case err == nil:
			logw.Printf("scale-down: %s drained in %s", name, time.Since(began).Round(time.Millisecond))
		case errors.Is(err, drain.ErrNoNode):
			logw.Printf("scale-down: %s has no Node (%s): nothing to drain", name, t.node)
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			uncordon()
			return fmt.Errorf("%w: %v; nothing was destroyed and the going nodes were uncordoned", errDrainBlocked, err)
		}
	}
	return nil
}

// deleteNodes deletes the Nodes of machines that are gone, retrying an API
// server that does not answer for a while; a failure is logged (the Node is
// a ghost, not a danger: its kubelet is gone with the machine).
func (w *Worker) deleteNodes(ctx context.Context, tenant string, gone []domain.Machine, logw *tofu.LogWriter) {
	if w.cfg.Kube == nil || len(gone) == 0 {
		return
	}
	var nodes []string
	for _, m := range gone {
		// drain: false keeps the pods, not the Node.
		if w.drains().SkipOf(&domain.NodeGroup{Metadata: domain.ObjectMeta{Tenant: tenant, Name: m.Spec.NodeGroup}}) == "" {
			nodes = append(nodes, drain.NodeName(&m))
		}
	}
	if len(nodes) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, nodeDeleteWait)
	defer cancel()
	d, err := w.drains().Drainer(dctx, tenant, nil)
	if err != nil {
		logw.Printf("scale-down: the Nodes of the gone machines (%v) stay: %v", nodes, err)
		return
	}
	for _, n := range nodes {
		for {
			err := d.Delete(dctx, n)
			if err == nil {
				logw.Printf("scale-down: Node %s deleted", n)
				break
			}
			if dctx.Err() != nil {
				logw.Printf("scale-down: Node %s stays: %v", n, err)
				break
			}
			select {
			case <-dctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// kubeletAway reports whether the last health probe found the machine
// unreachable or its Node not Ready: its kubelet will not confirm the end of
// the pods a drain deletes.
func kubeletAway(m *domain.Machine) bool {
	c := domain.FindCondition(m.Status.Conditions, domain.ConditionHealthy)
	return c != nil && c.Status == "False" && (c.Reason == "Unreachable" || c.Reason == "NodeNotReady")
}
