package configsync

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/kube/drain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// After a config that reboots a machine the controller waits: for the
// machine to be back through the Talos API (a control plane holds the
// rollout of the others meanwhile), then, when it was drained, for its Node
// to be Ready before it is uncordoned. Each wait is recorded on the machine
// (status.configWait: what for, since when, until when, the last answer) so
// that a user can tell a slow reboot from a dead one, and a controller that
// restarts mid-wait resumes it with the recorded deadline (resumeWaits)
// instead of starting RebootTimeout afresh.

// ReasonNotBack is the ConfigApplied reason of a machine that took a config
// with a reboot and was not back within RebootTimeout. It holds the config;
// a later pass that finds it back records it applied again.
const ReasonNotBack = "NotBackAfterReboot"

// backWait is what the controller waits for after m's config rebooted it.
// The words are the same at every try so that a resumed wait keeps its deadline.
func backWait(m *domain.Machine) string {
	return m.Metadata.Name + " to be back after its config reboot"
}

// nodeReadyWait is what the controller waits for before it uncordons the
// Node of a drained machine that is back.
func nodeReadyWait(node string) string {
	return "Node " + node + " to be Ready after its config reboot"
}

// setWait records machine ref's config wait; nil clears it.
func (p *pass) setWait(ctx context.Context, ref domain.Ref, w *domain.StepWait) {
	sw := eventstore.StatusWriter{Store: p.c.cfg.Store, Actor: Actor, Now: p.c.cfg.Now, Hint: p.c.cfg.Cache}
	_, err := eventstore.UpdateStatus(ctx, sw, ref, func(_ *domain.Object, st *domain.MachineStatus) (bool, error) {
		if w == nil && st.ConfigWait == nil {
			return false, nil
		}
		st.ConfigWait = w
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		p.record(fmt.Errorf("recording the config wait of machine %s: %w", ref.Name, err))
	}
}

// waitBack waits, after a config that rebooted m, until the node went
// down (or RebootDownWait passed without seeing it: a reboot quicker than
// a poll) and then until it answers with its services healthy, within
// RebootTimeout of the apply. prev is the wait recorded before a restart
// (nil right after an apply): its deadline holds, and the node is not
// watched going down (it did, or it is back). Past the deadline the
// machine's ConfigApplied says so (ReasonNotBack) and the error names the
// step and the last answer.
func (p *pass) waitBack(ctx context.Context, m *domain.Machine, prev *domain.StepWait) error {
	c := p.c
	clock := c.cfg.Clock
	ref := domain.ObjectRef(domain.MachineKind, p.tenant, m.Metadata.Name)
	w := domain.BeginWait(prev, backWait(m), clock.Now(), c.cfg.RebootTimeout)
	recorded := prev
	if prev == nil || prev.For != w.For {
		first := w // a copy: w goes on to take each answer
		recorded = &first
		p.setWait(ctx, ref, recorded)
		downBy := clock.Now().Add(c.cfg.RebootDownWait)
		for clock.Now().Before(downBy) && clock.Now().Before(w.Deadline) {
			if _, err := c.cfg.Nodes.Ready(ctx, p.bundle, m.Spec.Address); err != nil {
				break
			}
			if err := p.pause(ctx); err != nil {
				return err
			}
		}
	}

	for {
		problem, err := c.cfg.Nodes.Ready(ctx, p.bundle, m.Spec.Address)
		if ctx.Err() != nil {
			// Stopping: the wait stays recorded for the next leader.
			return ctx.Err()
		}
		if err == nil && problem == "" {
			p.setWait(ctx, ref, nil)
			return nil
		}
		if err != nil {
			problem = err.Error()
		}

		now := clock.Now()
		w.Observe(problem, now)
		if w.Expired(now) {
			msg := w.DeadlineProblem("the config reboot of " + m.Metadata.Name)
			p.setWait(ctx, ref, nil)
			p.record(c.rec.Failed(ctx, ref, ReasonNotBack, msg))
			return errors.New(msg)
		}
		if domain.WaitChanged(recorded, w) {
			next := w
			recorded = &next
			p.setWait(ctx, ref, recorded)
		}
		if err := p.pause(ctx); err != nil {
			return err
		}
	}
}

// uncordonWhenReady waits (within RebootTimeout, recorded as the machine's
// config wait; prev as in waitBack) for a drained machine's Node to be
// Ready after its config, then uncordons it. Called once the machine is
// back through the Talos API. A Node not Ready by the deadline stays
// cordoned and labelled: a later pass uncordons it once Ready
// (sweepDrained).
func (p *pass) uncordonWhenReady(ctx context.Context, d *drain.Drainer, m *domain.Machine, node string, prev *domain.StepWait) {
	c := p.c
	clock := c.cfg.Clock
	ref := domain.ObjectRef(domain.MachineKind, p.tenant, m.Metadata.Name)
	w := domain.BeginWait(prev, nodeReadyWait(node), clock.Now(), c.cfg.RebootTimeout)
	recorded := prev
	if prev == nil || prev.For != w.For {
		first := w // a copy: w goes on to take each answer
		recorded = &first
		p.setWait(ctx, ref, recorded)
	}

	for {
		why := ""
		n, err := d.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case ctx.Err() != nil:
			return
		case apierrors.IsNotFound(err):
			// No Node to wait for (a reboot keeps the Node object).
			p.setWait(ctx, ref, nil)
			p.release(ctx, d, node)
			return
		case err != nil:
			why = err.Error()
		default:
			if ok, msg := drain.Ready(n); !ok {
				why = "NotReady: " + msg
			}
		}
		if why == "" {
			p.setWait(ctx, ref, nil)
			p.release(ctx, d, node)
			return
		}

		now := clock.Now()
		w.Observe(why, now)
		if w.Expired(now) {
			p.setWait(ctx, ref, nil)
			p.log.Warn("config controller: a drained node is not Ready after its config; it stays cordoned", "node", node,
				"problem", w.DeadlineProblem("the uncordon of "+node))
			return
		}
		if domain.WaitChanged(recorded, w) {
			next := w
			recorded = &next
			p.setWait(ctx, ref, recorded)
		}
		if p.pause(ctx) != nil {
			return
		}
	}
}

// resumeWaits picks up the waits a controller stopped in (recorded on the
// machines): each with its recorded deadline, a control plane's first, as
// its rollout waited on it. It answers the control plane that is not back
// (nil when none): the rollout stays stopped, as when the wait began in
// this pass.
func (p *pass) resumeWaits(ctx context.Context, waves []wave) (*domain.Machine, error) {
	for _, w := range waves {
		for i := range w.machines {
			m := &w.machines[i]
			prev := m.Status.ConfigWait
			switch {
			case prev == nil:
			case prev.For == backWait(m):
				p.log.Info("config controller: resuming the wait for a machine's config reboot", "machine", m.Metadata.Name, "deadline", prev.Deadline)
				if err := p.waitBack(ctx, m, prev); err != nil {
					if ctx.Err() != nil || w.controlPlane {
						return m, err
					}
					continue
				}
			case p.c.cfg.Kube != nil && prev.For == nodeReadyWait(drain.NodeName(m)):
				d, err := p.c.drains().Drainer(ctx, p.tenant, nil)
				if err != nil {
					return nil, err
				}
				p.uncordonWhenReady(ctx, d, m, drain.NodeName(m), prev)
			default:
				// A wait this controller no longer makes (a Node that is not
				// drained any more): nothing resumes it.
				p.setWait(ctx, domain.ObjectRef(domain.MachineKind, p.tenant, m.Metadata.Name), nil)
			}
		}
	}
	return nil, ctx.Err()
}

// checkBack records a machine that was not back after its config reboot as
// holding its config once it answers healthy; until then the condition
// stays (and the other control planes wait, see othersDown).
func (p *pass) checkBack(ctx context.Context, it item) {
	problem, err := p.c.cfg.Nodes.Ready(ctx, p.bundle, it.m.Spec.Address)
	if err != nil || problem != "" {
		return
	}
	p.record(p.c.rec.Applied(ctx, it.ref, it.hash, talos.ReasonAppliedWithReboot, "back after its config reboot"))
}
