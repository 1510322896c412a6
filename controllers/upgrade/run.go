package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// upgradeRun carries out one Upgrade. Its status is kept here and written whole
// after every change, so the stream holds each step; a run built from that
// status after a restart goes on from the recorded step.
type upgradeRun struct {
	s     *Saga
	ref   domain.Ref
	spec  domain.UpgradeSpec
	nodes *sagaNodes
	// explicit: a user created the run (it carries no trigger label); a
	// Succeeded explicit run writes its version into the spec it covered.
	explicit bool

	// mu guards st and configs, and orders the writes of st.
	mu      sync.Mutex
	st      domain.UpgradeStatus
	lastSeq uint64
	// configs renders a Kubernetes run's configs (loaded once, see desired).
	configs *talos.Desired
	// rotation is a rotation run's PKI record, loaded at each stage.
	rotation *talos.Rotation

	canceled atomic.Bool
	// failed is set by the first step that fails; no step starts after it.
	failed atomic.Bool
}

// errUpgradeGone stops a run whose Upgrade was deleted, or ended by another
// writer (a cancel before it started).
var errUpgradeGone = errors.New("the upgrade was deleted or has ended")

// execute plans the run if it is new and carries it out. It returns an error
// only when the saga itself could not go on (the store, the PKI, ctx); a
// failed upgrade is a Failed run, not an error.
func (r *upgradeRun) execute(ctx context.Context) error {
	err := r.executeSteps(ctx)
	if errors.Is(err, errUpgradeGone) {
		return nil
	}
	if r.lastSeq > 0 {
		// The scheduler reads the cache next: let it see how this run ended.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = r.s.cfg.Cache.WaitFor(wctx, r.lastSeq)
		cancel()
	}
	return err
}

func (r *upgradeRun) executeSteps(ctx context.Context) error {
	rec, err := r.s.cfg.Store.Load(ctx, r.ref)
	if err != nil {
		return err
	}
	if rec == nil || rec.State() == nil {
		return errUpgradeGone
	}
	var u domain.Upgrade
	if err := json.Unmarshal(upgradeJSON(rec.State()), &u); err != nil {
		return fmt.Errorf("decoding %s: %w", r.ref, err)
	}
	if u.Status.Final() {
		return nil
	}
	r.spec, r.st = u.Spec, u.Status
	r.explicit = u.Metadata.Labels[LabelTrigger] == ""
	r.canceled.Store(u.Spec.CancelRequested)
	for _, e := range r.st.Machines {
		if e.Phase == domain.StepRollingBack || e.Phase == domain.StepRolledBack || e.Phase == domain.StepFailed || (e.Phase == domain.StepPending && e.Error != "") {
			r.failed.Store(true)
		}
	}
	if r.st.Phase == domain.UpgradePending && r.canceled.Load() {
		return r.finish(ctx, domain.UpgradeCanceled, "canceled before it started")
	}
	b, err := r.s.cfg.Bundles.Bundle(ctx, r.ref.Tenant)
	if err != nil {
		if domain.IsNotFound(err) {
			return r.finish(ctx, domain.UpgradeFailed, "the tenant has no PKI: "+err.Error())
		}
		return err
	}
	// A rotation changes the certificates a kept connection was opened
	// with: its calls dial afresh.
	if r.nodes, err = newSagaNodes(b, r.ref.Tenant, &r.s.cfg, !r.spec.Rotation()); err != nil {
		return err
	}
	defer func() { r.nodes.close() }()
	if r.st.Phase == domain.UpgradePending {
		r.s.cfg.Log.Info("upgrade starting", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "to", r.target())
		plan := r.plan
		switch {
		case r.spec.Rotation():
			plan = r.planRotation
		case r.spec.Kubernetes():
			plan = r.planKubernetes
		}
		if err := plan(ctx); err != nil {
			return err
		}
		if r.st.Final() {
			return nil
		}
	} else {
		r.s.cfg.Log.Info("upgrade resuming", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "to", r.target())
	}
	return r.carryOut(ctx)
}

// target is the version the run moves machines to (Talos or Kubernetes).
func (r *upgradeRun) target() string { return r.spec.Target() }

func upgradeJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// record changes the status under the lock and writes it, so writes land in
// the order of the changes. The write also reads a cancel request.
func (r *upgradeRun) record(ctx context.Context, change func(st *domain.UpgradeStatus)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	change(&r.st)
	var current []string
	for _, e := range r.st.Machines {
		switch e.Phase {
		case domain.StepDraining, domain.StepUpgrading, domain.StepRebooting, domain.StepVerifying, domain.StepRollingBack:
			current = append(current, e.Name)
		}
	}
	r.st.Current = strings.Join(current, ",")
	res, err := eventstore.UpdateStatus(ctx, r.s.statusWriter(), r.ref, func(obj *domain.Object, cur *domain.UpgradeStatus) (bool, error) {
		var spec domain.UpgradeSpec
		if err := json.Unmarshal(obj.Spec, &spec); err != nil {
			return false, fmt.Errorf("decoding the spec of %s: %w", r.ref, err)
		}
		if spec.CancelRequested {
			r.canceled.Store(true)
		}
		if cur.Final() && !r.st.Final() {
			return false, errUpgradeGone // a run that ended is never taken up again
		}
		*cur = r.st
		return true, nil
	})
	if domain.IsNotFound(err) {
		err = errUpgradeGone
	}
	if err != nil {
		if errors.Is(err, errUpgradeGone) {
			return err
		}
		return fmt.Errorf("recording %s: %w", r.ref, err)
	}
	if res.Seq > r.lastSeq {
		r.lastSeq = res.Seq
	}
	return nil
}

// recordStep changes one machine's entry, naming this replica as the one
// carrying the step on (a step taken up after a failover names the new one).
func (r *upgradeRun) recordStep(ctx context.Context, name string, change func(e *domain.UpgradeMachine)) error {
	return r.record(ctx, func(st *domain.UpgradeStatus) {
		for i := range st.Machines {
			if st.Machines[i].Name == name {
				before := st.Machines[i]
				change(&st.Machines[i])
				endWait(before, &st.Machines[i])
				st.Machines[i].Replica = r.s.cfg.Holder
				return
			}
		}
	})
}

// entry returns a copy of one machine's entry.
func (r *upgradeRun) entry(name string) domain.UpgradeMachine {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.st.Machines {
		if e.Name == name {
			return e
		}
	}
	return domain.UpgradeMachine{Name: name, Phase: domain.StepFailed}
}

func (r *upgradeRun) now() *time.Time {
	t := r.s.cfg.Now().UTC()
	return &t
}

// finish ends the run.
func (r *upgradeRun) finish(ctx context.Context, phase, reason string) error {
	err := r.record(ctx, func(st *domain.UpgradeStatus) {
		st.Phase, st.Reason, st.EndTime = phase, clipBytes(reason, domain.MaxUpgradeReasonBytes), r.now()
		for i := range st.Machines {
			clearWait(&st.Machines[i]) // nothing waits once the run is over
		}
	})
	if err == nil {
		r.s.cfg.Log.Info("upgrade finished", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "phase", phase, "reason", reason)
	}
	return err
}

func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}

// machine reads a machine of the tenant from the read model.
func (r *upgradeRun) machine(name string) (*domain.Machine, error) {
	ref := domain.ObjectRef(domain.MachineKind, r.ref.Tenant, name)
	m, ok, err := projections.Get[domain.Machine](r.s.cfg.Cache, ref)
	if err == nil && !ok {
		err = domain.NewNotFound(ref.Kind, name)
	}
	return m, err
}

// sleep waits before the next look at a node, in a wait that began at
// since (pollDelay).
func (r *upgradeRun) sleep(ctx context.Context, since time.Time) error {
	t := time.NewTimer(pollDelay(r.s.cfg.Now().Sub(since), r.s.cfg.PollInterval))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// firstPoll is the shortest pause between two looks at a node.
const firstPoll = 250 * time.Millisecond

// pollDelay is the pause before the next look at a node after waiting for
// it for waited: an eighth of the wait so far, at least firstPoll and at
// most most (Config.PollInterval). A look therefore comes at most an
// eighth late: a node that reboots in 7 s is seen back within a second,
// not two (issue 49: the fixed 2 s poll was most of a fleet rollout's
// overhead over the emulator's delays), and a wait of minutes still asks
// only every PollInterval.
func pollDelay(waited, most time.Duration) time.Duration {
	return min(max(waited/8, min(firstPoll, most)), most)
}
