package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// upgradeRun carries out one Upgrade. Its status is kept here and written whole
// after every change, so the stream holds each step; a run built from that
// status after a restart goes on from the recorded step.
type upgradeRun struct {
	s     *Saga
	ref   domain.Ref
	spec  domain.UpgradeSpec
	nodes *sagaNodes

	// mu guards st and orders the writes of it.
	mu      sync.Mutex
	st      domain.UpgradeStatus
	lastSeq uint64

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
	if r.nodes, err = newSagaNodes(b, r.ref.Tenant, &r.s.cfg); err != nil {
		return err
	}
	if r.st.Phase == domain.UpgradePending {
		r.s.cfg.Log.Info("upgrade starting", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "to", r.spec.TalosVersion)
		if err := r.plan(ctx); err != nil {
			return err
		}
		if r.st.Final() {
			return nil
		}
	} else {
		r.s.cfg.Log.Info("upgrade resuming", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "to", r.spec.TalosVersion)
	}
	return r.carryOut(ctx)
}

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
		case domain.StepUpgrading, domain.StepRebooting, domain.StepVerifying, domain.StepRollingBack:
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

// recordStep changes one machine's entry.
func (r *upgradeRun) recordStep(ctx context.Context, name string, change func(e *domain.UpgradeMachine)) error {
	return r.record(ctx, func(st *domain.UpgradeStatus) {
		for i := range st.Machines {
			if st.Machines[i].Name == name {
				change(&st.Machines[i])
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

// plan reads the version every machine runs, refuses a run that would skip
// or downgrade a minor version, orders the machines and starts the run.
func (r *upgradeRun) plan(ctx context.Context) error {
	ngs, err := projections.List[domain.NodeGroup](r.s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: r.ref.Tenant})
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, ng := range ngs {
		known[ng.Metadata.Name] = true
	}
	var missing []string
	for _, ng := range r.spec.NodeGroups {
		if !known[ng] {
			missing = append(missing, ng)
		}
	}
	if len(missing) > 0 {
		return r.finish(ctx, domain.UpgradeFailed, "refused: no node group "+strings.Join(missing, ", ")+" in the tenant")
	}
	all, err := projections.List[domain.Machine](r.s.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: r.ref.Tenant})
	if err != nil {
		return err
	}
	var machines []domain.Machine
	for _, m := range all {
		if r.spec.Includes(m.Spec.NodeGroup) {
			machines = append(machines, m)
		}
	}
	if len(machines) == 0 {
		return r.record(ctx, func(st *domain.UpgradeStatus) {
			st.Phase, st.StartTime, st.EndTime, st.Reason = domain.UpgradeSucceeded, r.now(), r.now(), "no machines to upgrade"
		})
	}
	from, unreachable := r.versions(ctx, machines)
	if len(unreachable) > 0 {
		return r.finish(ctx, domain.UpgradeFailed, "refused: cannot read the version of "+strings.Join(unreachable, "; "))
	}
	leader := r.leader(ctx, machines)
	steps := planUpgrade(machines, r.spec.TalosVersion, leader, from)
	if p := upgradePathProblems(steps); p != "" {
		return r.record(ctx, func(st *domain.UpgradeStatus) {
			st.Phase, st.Machines, st.Reason, st.StartTime, st.EndTime = domain.UpgradeFailed, steps, p, r.now(), r.now()
		})
	}
	return r.record(ctx, func(st *domain.UpgradeStatus) {
		st.Phase, st.Machines, st.StartTime, st.Reason = domain.UpgradeRunning, steps, r.now(), ""
	})
}

// versions asks every machine its version, 16 at a time.
func (r *upgradeRun) versions(ctx context.Context, machines []domain.Machine) (map[string]string, []string) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]string{}
		bad []string
	)
	sem := make(chan struct{}, 16)
	for i := range machines {
		m := &machines[i]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			v, err := r.nodes.version(ctx, m)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				bad = append(bad, m.Metadata.Name+" ("+describeTalosErr(err)+")")
				return
			}
			out[m.Metadata.Name] = v
		}()
	}
	wg.Wait()
	return out, bad
}

// leader names the machine that leads etcd, asking the control planes among
// machines in turn; "" when none answers (the order is then by name).
func (r *upgradeRun) leader(ctx context.Context, machines []domain.Machine) string {
	for i := range machines {
		m := &machines[i]
		if m.Spec.Role != domain.RoleControlPlane {
			continue
		}
		v, err := r.nodes.etcd(ctx, m)
		if err != nil {
			continue
		}
		for _, mb := range v.members {
			if mb.GetId() == v.leader {
				if lm := r.memberMachine(mb.GetHostname(), mb.GetPeerUrls()); lm != nil {
					return lm.Metadata.Name
				}
			}
		}
		return ""
	}
	return ""
}

// memberMachine finds the tenant's machine of an etcd member, by name,
// hostname or the address in its peer URLs.
func (r *upgradeRun) memberMachine(hostname string, peerURLs []string) *domain.Machine {
	machines, err := projections.List[domain.Machine](r.s.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: r.ref.Tenant})
	if err != nil {
		return nil
	}
	hosts := map[string]bool{}
	for _, p := range peerURLs {
		if u, err := url.Parse(p); err == nil {
			hosts[u.Hostname()] = true
		}
	}
	for i := range machines {
		m := &machines[i]
		if m.Spec.Role != domain.RoleControlPlane {
			continue
		}
		if m.Metadata.Name == hostname || (m.Spec.Hostname != "" && m.Spec.Hostname == hostname) || (m.Spec.Address != "" && hosts[m.Spec.Address]) {
			return m
		}
	}
	return nil
}

// stopping reports whether no further machine may start.
func (r *upgradeRun) stopping(ctx context.Context) bool {
	return ctx.Err() != nil || r.failed.Load() || r.canceled.Load()
}

// carryOut upgrades the control planes one by one (the etcd leader last),
// then the workers, maxParallelism at a time, and ends the run.
func (r *upgradeRun) carryOut(ctx context.Context) error {
	for {
		name, err := r.nextControlPlane(ctx)
		if err != nil || name == "" {
			break
		}
		if r.entry(name).Phase == domain.StepPending && r.stopping(ctx) {
			break
		}
		if err := r.step(ctx, name); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := r.workers(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return r.end(ctx)
}

// end records how the run ended.
func (r *upgradeRun) end(ctx context.Context) error {
	r.mu.Lock()
	total, done := len(r.st.Machines), 0
	reason := ""
	pending := false
	for _, e := range r.st.Machines {
		switch {
		case e.Phase == domain.StepDone:
			done++
		case e.Error != "" && reason == "":
			reason = fmt.Sprintf("%s (%s): %s", e.Name, e.Phase, e.Error)
		}
		if !e.Final() {
			pending = true
		}
	}
	r.mu.Unlock()
	tally := fmt.Sprintf("%d of %d machines on %s", done, total, r.spec.TalosVersion)
	switch {
	case r.failed.Load():
		if reason == "" {
			reason = "a step failed"
		}
		return r.finish(ctx, domain.UpgradeFailed, reason+"; "+tally)
	case pending && r.canceled.Load():
		return r.finish(ctx, domain.UpgradeCanceled, "canceled on request after the current step; "+tally)
	case pending:
		return fmt.Errorf("upgrade %s stopped with machines left", r.ref.Name)
	}
	return r.finish(ctx, domain.UpgradeSucceeded, tally)
}

// nextControlPlane picks the control plane to go on with: one whose step is
// under way (after a restart), else a pending one that does not lead etcd
// now, else the leader.
func (r *upgradeRun) nextControlPlane(ctx context.Context) (string, error) {
	r.mu.Lock()
	var pending []string
	for _, e := range r.st.Machines {
		if e.Role != domain.RoleControlPlane || e.Final() {
			continue
		}
		if e.Phase != domain.StepPending {
			r.mu.Unlock()
			return e.Name, nil
		}
		pending = append(pending, e.Name)
	}
	r.mu.Unlock()
	if len(pending) <= 1 {
		if len(pending) == 0 {
			return "", nil
		}
		return pending[0], nil
	}
	var cps []domain.Machine
	for _, name := range pending {
		if m, err := r.machine(name); err == nil {
			cps = append(cps, *m)
		}
	}
	leader := r.leader(ctx, cps)
	for _, name := range pending {
		if name != leader {
			return name, nil
		}
	}
	return pending[0], nil
}

// workers upgrades the workers with at most maxParallelism steps at a time;
// steps under way (after a restart) go first.
func (r *upgradeRun) workers(ctx context.Context) error {
	r.mu.Lock()
	var order []string
	for _, e := range r.st.Machines {
		if e.Role == domain.RoleWorker && !e.Final() && e.Phase != domain.StepPending {
			order = append(order, e.Name)
		}
	}
	for _, e := range r.st.Machines {
		if e.Role == domain.RoleWorker && e.Phase == domain.StepPending {
			order = append(order, e.Name)
		}
	}
	r.mu.Unlock()
	par := max(r.spec.MaxParallelism, 1)
	sem := make(chan struct{}, par)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for _, name := range order {
		if r.entry(name).Phase == domain.StepPending && r.stopping(ctx) {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || (r.entry(name).Phase == domain.StepPending && r.stopping(ctx)) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := r.step(ctx, name); err != nil {
				errOnce.Do(func() { firstErr = err })
			}
		}()
	}
	wg.Wait()
	return firstErr
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

// sleep waits one poll interval.
func (r *upgradeRun) sleep(ctx context.Context) error {
	t := time.NewTimer(r.s.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
