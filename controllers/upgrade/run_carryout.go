package upgrade

import (
	"context"
	"fmt"
	"sync"

	"github.com/rezuscloud/rezuscloud/domain"
)

// stopping reports whether no further machine may start.
func (r *upgradeRun) stopping(ctx context.Context) bool {
	return ctx.Err() != nil || r.failed.Load() || r.canceled.Load()
}

// carryOut upgrades the control planes one by one (the etcd leader last),
// then the workers, maxParallelism at a time, and ends the run.
func (r *upgradeRun) carryOut(ctx context.Context) error {
	if r.spec.Rotation() {
		return r.carryOutRotation(ctx)
	}
	if err := r.carryOutMachines(ctx); err != nil {
		return err
	}
	return r.end(ctx)
}

// carryOutMachines takes the control planes one by one (the etcd leader
// last), then the workers, maxParallelism at a time.
func (r *upgradeRun) carryOutMachines(ctx context.Context) error {
	for {
		name, err := r.nextControlPlane(ctx)
		if err != nil || name == "" {
			break
		}
		if r.entry(name).Phase == domain.StepPending && (r.stopping(ctx) || !r.awaitMaintenance(ctx)) {
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
	return ctx.Err()
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
	tally := fmt.Sprintf("%d of %d machines on %s", done, total, r.target())
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
	if err := r.writeBack(ctx); err != nil {
		return err
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
		if ctx.Err() != nil || (r.entry(name).Phase == domain.StepPending && (r.stopping(ctx) || !r.awaitMaintenance(ctx))) {
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
