package domain

import (
	"fmt"
	"time"
)

// DefaultRolloutProgressDeadline is a rollout's spec.progressDeadline when
// absent: long enough for one tenant's whole Talos upgrade, machine by
// machine (each step of which has a deadline of its own in the Upgrade),
// short enough that a wave nothing moves halts the same day.
const DefaultRolloutProgressDeadline = 6 * time.Hour

// ProgressDeadlineDuration is spec.progressDeadline as a duration (its
// default when absent; Validate has refused what does not parse).
func (s *RolloutSpec) ProgressDeadlineDuration() time.Duration {
	if d, err := time.ParseDuration(s.ProgressDeadline); err == nil && s.ProgressDeadline != "" {
		return d
	}
	return DefaultRolloutProgressDeadline
}

// RolloutWaveWaitFor is what a running wave waits for, in words that stay
// the same across restarts and change when one of its tenants finishes
// (which begins the wait, and its deadline, afresh).
func RolloutWaveWaitFor(wave int, change string, done, size int) string {
	return fmt.Sprintf("tenants of wave %d to finish %s (%d of %d done)", wave+1, change, done, size)
}

// RolloutSoakWaitFor is what a soaking wave waits for.
func RolloutSoakWaitFor(wave int) string {
	return fmt.Sprintf("tenants of wave %d to stay healthy through the soak", wave+1)
}

// WaitMessage renders the wave's wait as of now: a running wave's as any
// step's ("waiting for tenants of wave 2 to finish Talos v1.13.1 (1 of 3
// done): t2: upgrade …, 4m10s (fails in 5h55m)"); a soak's, whose end is
// success, with what it watches and when it passes. "" when it waits for
// nothing.
func (w *RolloutWaveStatus) WaitMessage(now time.Time) string {
	if w.Wait == nil || w.Wait.For == "" {
		return ""
	}
	if w.State != RolloutWaveSoaking {
		return w.Wait.Message(now)
	}
	msg := "soaking: watching " + w.Wait.For
	if w.Wait.LastError != "" {
		msg += " (" + w.Wait.LastError + ")"
	}
	msg += ", " + ShortDuration(now.Sub(w.Wait.Since))
	if left := w.Wait.Deadline.Sub(now); left > 0 {
		msg += "; the wave passes in " + ShortDuration(left) + " unless one turns unhealthy"
	} else {
		msg += "; the soak is over"
	}
	return msg
}

// waits records what each wave waits for as the status now stands: a
// running wave its running tenants (those that wait for their maintenance
// window aside) to finish, by spec.progressDeadline; a soaking one its
// tenants to stay healthy until SoakUntil. A recorded wait for the same
// thing keeps its start and deadline (a restart does not move them) unless
// fresh (a resume gives the wave a new deadline); a new answer is recorded
// at most every WaitRecordEvery (WaitChanged).
func (st *RolloutStatus) waits(spec *RolloutSpec, obs map[string]RolloutObservation, now time.Time, fresh bool) {
	for w := range st.Waves {
		wave := &st.Waves[w]
		prev := wave.Wait
		if fresh && wave.State == RolloutWaveRunning {
			prev = nil
		}
		var next *StepWait
		switch wave.State {
		case RolloutWaveRunning:
			next = st.runningWait(w, spec, obs, prev, now)
		case RolloutWaveSoaking:
			next = st.soakWait(w, spec, obs, prev, now)
		}
		if next != nil && prev != nil && !WaitChanged(prev, *next) {
			next = prev
		}
		wave.Wait = next
	}
}

// runningWait is running wave w's wait, nil when none of its tenants runs
// but for its maintenance window (or none runs: paused).
func (st *RolloutStatus) runningWait(w int, spec *RolloutSpec, obs map[string]RolloutObservation, prev *StepWait, now time.Time) *StepWait {
	var active []*RolloutTenantStatus
	for i := range st.Tenants {
		if t := &st.Tenants[i]; t.Wave == w && t.State == RolloutTenantRunning && !obs[t.Name].WindowWait {
			active = append(active, t)
		}
	}
	if len(active) == 0 {
		return nil
	}
	what := RolloutWaveWaitFor(w, spec.Change.Description(), st.doneIn(w), st.Waves[w].Size)
	next := BeginWait(prev, what, now, spec.ProgressDeadlineDuration())
	msg := active[0].Message
	if msg == "" {
		msg = "its change is not under way yet"
	}
	answer := active[0].Name + ": " + msg
	if len(active) > 1 {
		answer += fmt.Sprintf(" (and %d more running)", len(active)-1)
	}
	next.Observe(answer, now)
	return &next
}

// soakWait is soaking wave w's wait: from the soak's start to SoakUntil,
// with how many of its tenants the last probes found Ready.
func (st *RolloutStatus) soakWait(w int, spec *RolloutSpec, obs map[string]RolloutObservation, prev *StepWait, now time.Time) *StepWait {
	until := st.Waves[w].SoakUntil
	if until == nil {
		return nil
	}
	what := RolloutSoakWaitFor(w)
	next := StepWait{For: what, Since: until.Add(-spec.SoakDuration()), Deadline: *until}
	if next.Since.After(now) {
		next.Since = now
	}
	if prev != nil && prev.For == what && prev.Deadline.Equal(*until) {
		next = *prev
	}
	done, ready, unprobed := 0, 0, 0
	for _, t := range st.Tenants {
		if t.Wave != w || t.State != RolloutTenantDone {
			continue
		}
		done++
		switch obs[t.Name].Health {
		case HealthReady:
			ready++
		case rolloutHealthUnknown:
			unprobed++
		}
	}
	answer := fmt.Sprintf("%d of %d tenants Ready at the last probe", ready, done)
	if unprobed > 0 {
		answer += fmt.Sprintf(", %d not probed since its change", unprobed)
	}
	next.Observe(answer, now)
	return &next
}

// checkDeadline halts the rollout when the wave under way went past its
// progress deadline: what it waited for and the last answer are the reason.
func (st *RolloutStatus) checkDeadline(now time.Time) {
	w := st.CurrentWave()
	if w >= len(st.Waves) {
		return
	}
	wave := &st.Waves[w]
	if wave.State != RolloutWaveRunning || wave.Wait == nil || !wave.Wait.Expired(now) {
		return
	}
	tenant := ""
	for _, t := range st.Tenants {
		if t.Wave == w && t.State == RolloutTenantRunning {
			tenant = t.Name
			break
		}
	}
	st.halt(tenant, wave.Wait.DeadlineProblem(fmt.Sprintf("wave %d (spec.progressDeadline)", w+1)), now)
}
