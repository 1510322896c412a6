package upgrade

import (
	"context"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// waitCheck is one look at what a step waits for: done when it is there;
// stop, a problem that ends the wait at once (say, a node that came back
// on the wrong version); else last, the answer that keeps it waiting.
type waitCheck func(ctx context.Context) (done bool, last, stop string)

// await polls check (pollDelay apart) until it is done, stops, or the
// step's deadline passes, and answers "" when done, the stop, or the
// deadline problem naming the stage, what it waited for and the last
// answer. The wait is recorded in the machine's step (domain.StepWait)
// once a first look did not find it done, and again when the answer
// changes, so a reader sees what a slow step waits for; a wait recorded
// before for the same thing (the step resumed after a restart) keeps its
// start and deadline. A ctx that ends answers "" (callers check ctx).
func (r *upgradeRun) await(ctx context.Context, name, stage, what string, timeout time.Duration, check waitCheck) string {
	prev := r.entry(name).Wait
	w := domain.BeginWait(prev, what, r.s.cfg.Now(), timeout)
	recorded := prev
	since := r.s.cfg.Now()
	for {
		done, last, stop := check(ctx)
		switch {
		case ctx.Err() != nil:
			return ""
		case done:
			return ""
		case stop != "":
			return stop
		}
		now := r.s.cfg.Now()
		w.Observe(last, now)
		if w.Expired(now) {
			return w.DeadlineProblem(stage)
		}
		if domain.WaitChanged(recorded, w) {
			rec := w
			err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Wait, e.Message = &rec, waitWords(&rec) })
			switch {
			case err == nil:
				recorded = &rec
			case ctx.Err() == nil:
				// The wait goes on; the next change tries again.
				r.s.cfg.Log.Warn("upgrade saga: recording a wait", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "machine", name, "err", err)
			}
		}
		if r.sleep(ctx, since) != nil {
			return ""
		}
	}
}

// waitWords is a recorded wait as the step's message: what it waits for
// and the last answer, without the durations a reader adds (Message).
func waitWords(w *domain.StepWait) string {
	s := "waiting for " + w.For
	if w.LastError != "" {
		s += ": " + w.LastError
	}
	return clipBytes(s, domain.MaxUpgradeErrorBytes)
}

// deadline is the run's deadline for a stage ("precheck", "reboot",
// "verify"): the Upgrade's spec.deadlines, else the saga's default.
func (r *upgradeRun) deadline(stage string) time.Duration {
	def := map[string]time.Duration{"precheck": r.s.cfg.PrecheckTimeout, "reboot": r.s.cfg.RebootTimeout, "verify": r.s.cfg.HealthTimeout}[stage]
	return r.spec.Deadlines.Duration(stage, def)
}

// clearWait drops a step's wait and the message that only repeated it.
func clearWait(e *domain.UpgradeMachine) {
	if e.Wait != nil && e.Message == waitWords(e.Wait) {
		e.Message = ""
	}
	e.Wait = nil
}

// endWait clears a step's wait when its phase moves on (unless the change
// set a new one), and the message that only repeated it.
func endWait(before domain.UpgradeMachine, after *domain.UpgradeMachine) {
	if before.Wait == nil || after.Phase == before.Phase || after.Wait != before.Wait {
		return
	}
	clearWait(after)
}
