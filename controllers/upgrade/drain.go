package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/kube/drain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// KubeSource gives a tenant's Kubernetes client (a *kubeclient.Clients).
type KubeSource interface {
	For(ctx context.Context, tenant string) (kubernetes.Interface, error)
	// ServerVersionAt asks the API server of the control plane at address.
	ServerVersionAt(ctx context.Context, tenant, address string) (string, error)
}

// hasKube reports whether the machine runs Kubernetes the saga can ask:
// a client is configured and the machine's group is not skipped.
func (r *upgradeRun) hasKube(m *domain.Machine) bool {
	if r.s.cfg.Kube == nil {
		return false
	}
	if r.s.cfg.DrainSkip == nil {
		return true
	}
	ng, ok := projections.Lookup[domain.NodeGroup](r.s.cfg.Cache, domain.NodeGroupKind)(r.ref.Tenant, m.Spec.NodeGroup)
	if !ok {
		ng = &domain.NodeGroup{Metadata: domain.ObjectMeta{Tenant: r.ref.Tenant, Name: m.Spec.NodeGroup}}
	}
	return r.drains().SkipOf(ng) == ""
}

// kubeVersionProblem checks a machine on Kubernetes version through
// Kubernetes: its Node's kubelet reports version and, on a control plane,
// the API server on that machine answers version at /version. It answers
// the problem ("" when there is none, or nothing to ask).
func (r *upgradeRun) kubeVersionProblem(ctx context.Context, m *domain.Machine, version string) string {
	if !r.hasKube(m) {
		return ""
	}
	want := "v" + strings.TrimPrefix(version, "v")
	if m.Spec.Role == domain.RoleControlPlane && m.Spec.Address != "" {
		got, err := r.s.cfg.Kube.ServerVersionAt(ctx, r.ref.Tenant, m.Spec.Address)
		switch {
		case err != nil:
			return "its API server does not answer /version: " + err.Error()
		case got != want:
			return fmt.Sprintf("its API server answers %s, not %s", got, want)
		}
	}
	cs, err := r.s.cfg.Kube.For(ctx, r.ref.Tenant)
	if err != nil {
		return "reaching the Kubernetes API: " + err.Error()
	}
	node := drain.NodeName(m)
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("reading its Node %s: %v", node, err)
	}
	if got := n.Status.NodeInfo.KubeletVersion; got != want {
		return fmt.Sprintf("its Node %s reports kubelet %s, not %s", node, got, want)
	}
	if ok, msg := drain.Ready(n); !ok {
		return fmt.Sprintf("its Node %s is NotReady: %s", node, msg)
	}
	return ""
}

// drains is how the saga drains machines: by each one's node group, in
// the tenant's cluster.
func (r *upgradeRun) drains() drain.Machines {
	return drain.Machines{Kube: r.s.cfg.Kube, Group: projections.Lookup[domain.NodeGroup](r.s.cfg.Cache, domain.NodeGroupKind),
		Skip: r.s.cfg.DrainSkip, Poll: r.s.cfg.DrainPoll, Now: r.s.cfg.Now}
}

func (r *upgradeRun) drainPolicy(m *domain.Machine) drain.Policy {
	optOut := ""
	if r.spec.NoDrain {
		optOut = "the run says noDrain"
	}
	return r.drains().Policy(r.ref.Tenant, m, optOut)
}

func (r *upgradeRun) drainer(ctx context.Context, name string) (*drain.Drainer, error) {
	last := -1
	return r.drains().Drainer(ctx, r.ref.Tenant, func(left int) {
		if left == last {
			return
		}
		last = left
		_ = r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Message = drain.Progress(left) })
	})
}

// drainStep is the step's Draining stage, before the node is asked to
// upgrade: cordon the machine's Node and evict its pods, PDBs honoured,
// within the group's drainTimeout counted from when the stage began (kept
// in the step's Started across restarts, so a resumed drain does not get a
// new bound). A drain that does not finish (blocked by a budget, or an
// eviction refused for good) uncordons the node, fails the step without
// touching the machine, and stops the run: stopped is true.
func (r *upgradeRun) drainStep(ctx context.Context, m *domain.Machine, e domain.UpgradeMachine) (stopped bool, err error) {
	pol := r.drainPolicy(m)
	name := m.Metadata.Name
	if !pol.Drain {
		r.s.cfg.Log.Debug("upgrade: no drain", "tenant", r.ref.Tenant, "machine", name, "why", pol.Why)
		return false, nil
	}
	started := r.now()
	if e.Phase == domain.StepDraining && e.Started != nil {
		started = e.Started
	}
	if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
		e.Phase, e.Started, e.Message, e.Error = domain.StepDraining, started, "Draining", ""
	}); err != nil {
		return true, err
	}
	node := drain.NodeName(m)
	d, err := r.drainer(ctx, name)
	if err == nil {
		err = d.Drain(ctx, node, *started, drain.Timeout(pol.Timeout))
	}
	switch {
	case err == nil:
		r.s.cfg.Log.Info("upgrade: drained", "tenant", r.ref.Tenant, "machine", name, "node", node, "took", r.s.cfg.Now().Sub(*started).Round(time.Millisecond))
		return false, nil
	case errors.Is(err, drain.ErrNoNode):
		r.s.cfg.Log.Info("upgrade: no Node to drain", "tenant", r.ref.Tenant, "machine", name, "node", node)
		return false, nil
	case ctx.Err() != nil:
		return true, ctx.Err()
	}
	// Blocked or refused: the machine stays as it is, schedulable again.
	why := err.Error()
	if d != nil {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.s.cfg.CallTimeout)
		if uerr := d.Uncordon(uctx, node); uerr != nil {
			why += "; uncordoning it failed too: " + uerr.Error()
		} else {
			why += "; the node was uncordoned and not rebooted"
		}
		cancel()
	}
	r.failed.Store(true)
	r.s.cfg.Log.Warn("upgrade: drain failed; the machine is left as it was", "tenant", r.ref.Tenant, "machine", name, "reason", why)
	if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
		e.Phase, e.Finished, e.Message = domain.StepFailed, r.now(), ""
		e.Error = clipBytes(why, domain.MaxUpgradeErrorBytes)
	}); err != nil {
		return true, err
	}
	return true, nil
}

// uncordonStep ends a drained machine's step once it is back: wait for its
// Node to be Ready (within the verify deadline, recorded as the step's
// wait), then make it schedulable.
// It answers the problem when the Node does not come back Ready. A machine
// without a Node (never registered) has nothing to uncordon.
func (r *upgradeRun) uncordonStep(ctx context.Context, m *domain.Machine) string {
	if !r.drainPolicy(m).Drain {
		return ""
	}
	d, err := r.drainer(ctx, m.Metadata.Name)
	if err != nil {
		return "reaching the Kubernetes API: " + err.Error()
	}
	node := drain.NodeName(m)
	noNode := false
	p := r.await(ctx, m.Metadata.Name, domain.StepVerifying, "the Node "+node+" to be Ready", r.deadline("verify"),
		func(ctx context.Context) (bool, string, string) {
			n, err := d.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				noNode = true
				return true, "", ""
			case err != nil:
				return false, err.Error(), ""
			}
			if ok, msg := drain.Ready(n); !ok {
				return false, "NotReady: " + msg, ""
			}
			return true, "", ""
		})
	switch {
	case ctx.Err() != nil:
		return ctx.Err().Error()
	case p != "":
		return p
	case noNode:
		return ""
	}
	if err := d.Uncordon(ctx, node); err != nil {
		return err.Error()
	}
	return ""
}

// uncordonQuietly makes a rolled-back machine's Node schedulable again;
// failures are logged (the run has failed already).
func (r *upgradeRun) uncordonQuietly(ctx context.Context, m *domain.Machine) {
	if !r.drainPolicy(m).Drain {
		return
	}
	d, err := r.drainer(ctx, m.Metadata.Name)
	if err == nil {
		err = d.Uncordon(ctx, drain.NodeName(m))
	}
	if err != nil && ctx.Err() == nil {
		r.s.cfg.Log.Warn("upgrade: uncordoning a rolled-back machine", "tenant", r.ref.Tenant, "machine", m.Metadata.Name, "err", err)
	}
}
