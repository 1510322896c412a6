package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// How often `upgrade --wait` repeats the line of a step that waits, so that
// its elapsed time moves although the server records a wait only when it
// begins or its last answer changes: a person at a terminal sees a line
// every 10 s, a log one every 30 s (and one whenever the wait changes).
const (
	upgradeWaitEveryTerminal = 10 * time.Second
	upgradeWaitEveryLog      = 30 * time.Second
	// upgradeWaitTick is how often a repeat is considered.
	upgradeWaitTick = time.Second
)

// upgradeProgress prints what changed since the last state it saw, and
// repeats the line of each machine whose step waits. show (the watch) and
// refresh (a ticker) run on different goroutines.
type upgradeProgress struct {
	out, errOut io.Writer
	now         func() time.Time
	every       time.Duration

	mu    sync.Mutex
	phase string
	// stage is the rotation stage the lines are of ("" for an upgrade).
	stage   string
	width   int
	seen    map[string]string // machine -> its state as printed, durations aside
	order   []string          // the plan's machines, in its order
	waiting map[string]shownWait
}

// shownWait is a waiting machine as last printed, and when.
type shownWait struct {
	m  domain.UpgradeMachine
	at time.Time
}

func newUpgradeProgress(out, errOut io.Writer, now func() time.Time, terminal bool) *upgradeProgress {
	every := upgradeWaitEveryLog
	if terminal {
		every = upgradeWaitEveryTerminal
	}
	return &upgradeProgress{out: out, errOut: errOut, now: now, every: every,
		seen: map[string]string{}, waiting: map[string]shownWait{}}
}

// show prints the news of one state of the upgrade; done says it has ended,
// with an error unless it Succeeded.
func (p *upgradeProgress) show(o *domain.Object) (done bool, err error) {
	var u domain.Upgrade
	raw, _ := json.Marshal(o)
	if err := json.Unmarshal(raw, &u); err != nil {
		return false, fmt.Errorf("the server sent an upgrade that is not one: %w", err)
	}
	st := u.Status
	now := p.now()

	p.mu.Lock()
	defer p.mu.Unlock()
	if st.Phase != p.phase && st.Phase == domain.UpgradeRunning {
		fmt.Fprintf(p.out, "%s: %d machines, control planes first\n", st.Phase, len(st.Machines))
	}
	if r := st.Rotation; r != nil && r.Stage != p.stage {
		// Each stage takes every machine from Pending again: its lines
		// start afresh under the stage's.
		p.stage, p.seen, p.waiting = r.Stage, map[string]string{}, map[string]shownWait{}
		fmt.Fprintf(p.out, "stage %s (%d/%d)\n", r.Stage, slices.Index(r.Stages, r.Stage)+1, len(r.Stages))
	}
	p.width, p.order = 0, p.order[:0]
	for _, m := range st.Machines {
		p.width = max(p.width, len(m.Name))
		p.order = append(p.order, m.Name)
	}
	for _, m := range st.Machines {
		waits := m.Wait != nil && !m.Final() && !st.Final()
		if !waits {
			delete(p.waiting, m.Name)
		}
		state := upgradeMachineState(m)
		if p.seen[m.Name] == state || (p.seen[m.Name] == "" && m.Phase == domain.StepPending && m.Wait == nil) {
			continue
		}
		p.seen[m.Name] = state
		fmt.Fprintln(p.out, p.line(m, now))
		if waits {
			p.waiting[m.Name] = shownWait{m: m, at: now}
		}
	}
	p.phase = st.Phase
	if !st.Final() {
		return false, nil
	}
	if st.Phase != domain.UpgradeSucceeded {
		fmt.Fprintf(p.errOut, "%s: %s\n", st.Phase, failureReason(st))
		return true, exitError{code: 1}
	}
	fmt.Fprintf(p.out, "%s: %s\n", st.Phase, st.Reason)
	return true, nil
}

// refresh repeats the line of each waiting machine not printed for a while,
// with its elapsed time as of now.
func (p *upgradeProgress) refresh() {
	now := p.now()

	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range p.order {
		w, ok := p.waiting[name]
		if !ok || now.Sub(w.at) < p.every {
			continue
		}
		fmt.Fprintln(p.out, p.line(w.m, now))
		w.at = now
		p.waiting[name] = w
	}
}

// line is one machine's line: its move (from -> to, or a rotation's
// stage), its step, what it waits for as of now, how long it took or why
// it failed.
func (p *upgradeProgress) line(m domain.UpgradeMachine, now time.Time) string {
	state := m.Phase
	switch {
	case m.Final():
	case m.Wait != nil:
		state = m.Phase + ": " + m.Wait.Message(now)
	case m.Message != "":
		state = m.Message // "Draining (4 pods left)"
	}
	move := orDash(m.From) + " -> " + m.To
	if p.stage != "" {
		move = p.stage // a rotation moves no version
	}
	line := fmt.Sprintf("%-*s  %-12s  %s  %s", p.width, m.Name, m.Role, move, state)
	if m.Phase == domain.StepDone && m.Started != nil && m.Finished != nil {
		line += fmt.Sprintf(" (%s)", m.Finished.Sub(*m.Started).Round(100*time.Millisecond))
	}
	if m.Error != "" && m.Final() {
		line += ": " + m.Error
	}
	return line
}

// upgradeMachineState is what a machine's line says, durations aside: a
// line is printed when it changes, not whenever the wait's time moves (or a
// check with the same answer is recorded).
func upgradeMachineState(m domain.UpgradeMachine) string {
	switch {
	case m.Final():
		return m.Phase
	case m.Wait != nil:
		return fmt.Sprintf("%s\x00%s\x00%s\x00%s", m.Phase, m.Wait.For, m.Wait.LastError, m.Wait.Since)
	case m.Message != "":
		return m.Message
	}
	return m.Phase
}

// failureReason is why a run that did not succeed ended: its reason (the
// saga names the step and its last error there), else its machines' errors.
func failureReason(st domain.UpgradeStatus) string {
	if st.Reason != "" {
		return st.Reason
	}
	for _, m := range st.Machines {
		if m.Error != "" {
			return m.Name + ": " + m.Error
		}
	}
	return "no reason given"
}
