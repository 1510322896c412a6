package domain

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Health states a rollout observation carries besides HealthReady: "" is
// not known (no probe since the tenant's change finished).
const rolloutHealthUnknown = ""

// RolloutObservation is what the rollout controller saw of one tenant.
type RolloutObservation struct {
	// Gone: the tenant is deleted or being deleted.
	Gone bool
	// Looked: a waiting tenant was looked at for AtTarget. The controller
	// looks only at the first waiting tenants of the wave under way (as
	// many as may start, and some): a waiting tenant not looked at is not
	// started this round, nor any after it, so the cost of a round stays
	// with the wave's parallelism, not the fleet's size.
	Looked bool
	// AtTarget: the tenant runs the change already; it needs no work.
	AtTarget bool
	// Change is the state of the tenant's Upgrade or config change for its
	// current attempt: "" (not written yet), Running, Done or Failed.
	Change string
	// Message is what the change waits for, or why it failed.
	Message string
	// Health is the last probe's state (HealthReady, HealthDegraded,
	// HealthUnreachable) if it began after the tenant's change finished;
	// "" when none did.
	Health       string
	HealthReason string
	// WindowWait: the running change waits, nothing under way, for the
	// tenant's maintenance window; that time does not count against the
	// wave's progress deadline.
	WindowWait bool
}

// RolloutInput is what DecideRollout decides from.
type RolloutInput struct {
	Spec       RolloutSpec
	Generation int64
	Status     RolloutStatus
	// Selected are the tenants the selector picks now, in name order; read
	// only when the rollout starts (the tenants are fixed then).
	Selected []string
	// Observed holds each of the rollout's tenants, by name.
	Observed map[string]RolloutObservation
	Now      time.Time
}

// RolloutStart is a tenant whose change begins (its Upgrade or ConfigPatch
// is written under a name of the rollout and the attempt).
type RolloutStart struct {
	Tenant  string
	Attempt int
}

// RolloutDecision is the rollout's next status and what to do for it.
type RolloutDecision struct {
	Status RolloutStatus
	// Start: write these tenants' changes (after the status is stored, so
	// that a restart finds them Running and writes them again, idempotently).
	Start []RolloutStart
	// Cancel: ask these tenants' running Upgrades to stop (an abort).
	Cancel []string
	// RecheckAt is when the decision changes without anything observed
	// changing (a soak's end, a wave's progress deadline); zero when only
	// observations move it.
	RecheckAt time.Time
}

// DecideRollout is the rollout's pure step: it fixes the tenants and waves
// when the rollout starts, moves each tenant by what was observed, halts on
// a failed tenant or an unhealthy one of the current wave, or when the
// current wave went past its progress deadline without a tenant finishing,
// resumes from a halt the user acknowledged (spec.resumeHalt; the wave gets
// a new deadline), ends soaks, and starts the next tenants of the current
// wave within its parallelism. Each wave records what it waits for
// (RolloutWaveStatus.Wait). Nothing starts while the rollout is paused,
// halted or aborted; a tenant at the target already is Done without a
// start.
func DecideRollout(in RolloutInput) RolloutDecision {
	st := cloneRolloutStatus(in.Status)
	now := in.Now.UTC()
	if st.Finished() {
		return RolloutDecision{Status: st}
	}
	st.ObservedGeneration = in.Generation
	var d RolloutDecision
	if st.StartedAt == nil {
		if done := st.fix(&in.Spec, in.Selected, now); done {
			d.Status = st
			return d
		}
	}
	if in.Spec.Abort {
		for _, t := range st.Tenants {
			if t.State == RolloutTenantRunning {
				d.Cancel = append(d.Cancel, t.Name)
			}
		}
		st.Phase, st.FinishedAt = RolloutAborted, ptrTime(now)
		st.Message = "aborted: nothing new starts; the upgrades under way stop after their current machine"
		st.count()
		d.Status = st
		return d
	}
	st.observe(in.Observed, now)
	resumed := false
	if h := st.Halt; h != nil && !h.Resumed && in.Spec.ResumeHalt >= h.Number {
		h.Resumed, resumed = true, true
		for i := range st.Tenants {
			if t := &st.Tenants[i]; t.State == RolloutTenantFailed {
				t.State, t.Message = RolloutTenantWaiting, fmt.Sprintf("starts again: resumed from halt %d", h.Number)
			}
		}
	}
	if !st.Halted() {
		st.checkHalt(in.Observed, now)
	}
	st.waits(&in.Spec, in.Observed, now, resumed)
	if !st.Halted() {
		st.checkDeadline(now)
	}
	if !st.Halted() {
		d.Start = st.advance(&in.Spec, in.Observed, now)
		st.waits(&in.Spec, in.Observed, now, false)
	}
	st.count()
	switch {
	case st.allWavesDone():
		st.Phase, st.FinishedAt = RolloutSucceeded, ptrTime(now)
		st.Message = fmt.Sprintf("%s reached %d tenants", in.Spec.Change.Description(), st.Counts.Done)
		if st.Counts.Skipped > 0 {
			st.Message += fmt.Sprintf(" (%d deleted before their turn)", st.Counts.Skipped)
		}
	case st.Halted():
		st.Phase = RolloutHalted
		st.Message = fmt.Sprintf("halted at tenant %s: %s", st.Halt.Tenant, st.Halt.Reason)
	case in.Spec.Paused:
		st.Phase = RolloutPaused
		st.Message = fmt.Sprintf("paused: %d running go on, %d waiting", st.Counts.Running, st.Counts.Waiting)
	default:
		st.Phase = RolloutProgressing
		st.Message = st.progress()
	}
	for _, w := range st.Waves {
		var at time.Time
		switch {
		case st.Halted():
		case w.State == RolloutWaveSoaking && w.SoakUntil != nil:
			at = *w.SoakUntil
		case w.State == RolloutWaveRunning && w.Wait != nil:
			at = w.Wait.Deadline
		}
		if !at.IsZero() && (d.RecheckAt.IsZero() || at.Before(d.RecheckAt)) {
			d.RecheckAt = at
		}
	}
	d.Status = st
	return d
}

// fix records the tenants and the waves at the start; it reports whether
// the rollout ended there (nothing selected, or too much).
func (st *RolloutStatus) fix(spec *RolloutSpec, selected []string, now time.Time) bool {
	st.StartedAt = ptrTime(now)
	switch n := len(selected); {
	case n == 0:
		st.Phase, st.FinishedAt, st.Message = RolloutSucceeded, ptrTime(now), "no tenant matches the selector"
		return true
	case n > MaxRolloutTenants:
		st.Phase, st.FinishedAt = RolloutAborted, ptrTime(now)
		st.Message = fmt.Sprintf("the selector picks %d tenants; a rollout takes at most %d: narrow spec.tenantSelector and create one rollout per part", n, MaxRolloutTenants)
		return true
	}
	sizes := spec.WaveSizes(len(selected))
	st.Waves = make([]RolloutWaveStatus, len(sizes))
	st.Tenants = make([]RolloutTenantStatus, 0, len(selected))
	next := 0
	for w, size := range sizes {
		st.Waves[w] = RolloutWaveStatus{Size: size, State: RolloutWaveWaiting}
		for _, name := range selected[next : next+size] {
			st.Tenants = append(st.Tenants, RolloutTenantStatus{Name: name, Wave: w, State: RolloutTenantWaiting})
		}
		next += size
	}
	return false
}

// observe moves the tenants by what their changes and the read model say.
func (st *RolloutStatus) observe(obs map[string]RolloutObservation, now time.Time) {
	for i := range st.Tenants {
		t := &st.Tenants[i]
		o := obs[t.Name]
		switch {
		case t.State == RolloutTenantWaiting && o.Gone:
			t.State, t.Message, t.FinishedAt = RolloutTenantSkipped, "deleted before its turn", ptrTime(now)
		case t.State != RolloutTenantRunning:
		case o.Gone:
			t.State, t.Message, t.FinishedAt = RolloutTenantSkipped, "deleted during its change", ptrTime(now)
		case o.Change == RolloutTenantDone:
			t.State, t.Message, t.FinishedAt = RolloutTenantDone, clipMessage(o.Message, MaxRolloutMessage), ptrTime(now)
		case o.Change == RolloutTenantFailed:
			t.State, t.Message, t.FinishedAt = RolloutTenantFailed, clipMessage(o.Message, MaxRolloutMessage), ptrTime(now)
		default:
			t.Message = clipMessage(o.Message, MaxRolloutMessage)
		}
	}
}

// checkHalt halts at the first failed tenant, or else at the first tenant
// of a wave under way (running or soaking) whose probe since its change
// finished found it unhealthy.
func (st *RolloutStatus) checkHalt(obs map[string]RolloutObservation, now time.Time) {
	for i := range st.Tenants {
		if t := &st.Tenants[i]; t.State == RolloutTenantFailed {
			st.halt(t.Name, "its change failed: "+t.Message, now)
			return
		}
	}
	for i := range st.Tenants {
		t := &st.Tenants[i]
		if t.State != RolloutTenantDone {
			continue
		}
		if ws := st.Waves[t.Wave].State; ws != RolloutWaveRunning && ws != RolloutWaveSoaking {
			continue
		}
		if o := obs[t.Name]; o.Health != rolloutHealthUnknown && o.Health != HealthReady {
			reason := "unhealthy after its change (" + o.Health + ")"
			if o.HealthReason != "" {
				reason += ": " + o.HealthReason
			}
			st.halt(t.Name, reason, now)
			return
		}
	}
}

// halt halts the rollout at tenant for reason.
func (st *RolloutStatus) halt(tenant, reason string, now time.Time) {
	n := 1
	if st.Halt != nil {
		n = st.Halt.Number + 1
	}
	st.Halt = &RolloutHalt{Number: n, Tenant: tenant, Reason: clipMessage(reason, 1024), At: now}
}

// advance ends the soaks that are over, starts the current wave, and
// answers the tenants that start now.
func (st *RolloutStatus) advance(spec *RolloutSpec, obs map[string]RolloutObservation, now time.Time) []RolloutStart {
	var starts []RolloutStart
	for w := range st.Waves {
		wave := &st.Waves[w]
		if wave.State == RolloutWaveDone {
			continue
		}
		if wave.State == RolloutWaveWaiting {
			if spec.Paused {
				return starts
			}
			wave.State, wave.StartedAt = RolloutWaveRunning, ptrTime(now)
		}
		if wave.State == RolloutWaveRunning {
			starts = append(starts, st.startIn(w, spec, obs, now)...)
			if !st.waveOver(w) {
				return starts
			}
			if wave.Size == 0 {
				wave.State, wave.FinishedAt = RolloutWaveDone, ptrTime(now)
				continue
			}
			wave.State, wave.SoakUntil = RolloutWaveSoaking, ptrTime(now.Add(spec.SoakDuration()))
		}
		if now.Before(*wave.SoakUntil) {
			return starts
		}
		wave.State, wave.SoakUntil, wave.FinishedAt = RolloutWaveDone, nil, ptrTime(now)
	}
	return starts
}

// startIn starts wave w's waiting tenants in order within its parallelism
// (not while paused), up to the first one not looked at; a tenant at the
// target already is Done at once, without taking a place.
func (st *RolloutStatus) startIn(w int, spec *RolloutSpec, obs map[string]RolloutObservation, now time.Time) []RolloutStart {
	if spec.Paused {
		return nil
	}
	limit := spec.Waves[w].MaxParallel
	if limit == 0 {
		limit = st.Waves[w].Size
	}
	running := 0
	for _, t := range st.Tenants {
		if t.Wave == w && t.State == RolloutTenantRunning {
			running++
		}
	}
	var starts []RolloutStart
	for i := range st.Tenants {
		t := &st.Tenants[i]
		if t.Wave != w || t.State != RolloutTenantWaiting {
			continue
		}
		if running >= limit {
			break
		}
		o := obs[t.Name]
		if !o.Looked {
			break
		}
		if o.AtTarget && t.Attempt == 0 {
			t.State, t.Message, t.FinishedAt = RolloutTenantDone, "at the target already", ptrTime(now)
			continue
		}
		t.Attempt++
		t.State, t.Message, t.StartedAt, t.FinishedAt = RolloutTenantRunning, "starting", ptrTime(now), nil
		starts = append(starts, RolloutStart{Tenant: t.Name, Attempt: t.Attempt})
		running++
	}
	return starts
}

func (st *RolloutStatus) waveOver(w int) bool {
	for _, t := range st.Tenants {
		if t.Wave == w && t.State != RolloutTenantDone && t.State != RolloutTenantSkipped {
			return false
		}
	}
	return true
}

func (st *RolloutStatus) allWavesDone() bool {
	return len(st.Waves) > 0 && !slices.ContainsFunc(st.Waves, func(w RolloutWaveStatus) bool { return w.State != RolloutWaveDone })
}

func (st *RolloutStatus) count() {
	c := RolloutCounts{Total: len(st.Tenants)}
	for _, t := range st.Tenants {
		switch t.State {
		case RolloutTenantWaiting:
			c.Waiting++
		case RolloutTenantRunning:
			c.Running++
		case RolloutTenantDone:
			c.Done++
		case RolloutTenantFailed:
			c.Failed++
		case RolloutTenantSkipped:
			c.Skipped++
		}
	}
	st.Counts = c
}

// progress says where a progressing rollout is.
func (st *RolloutStatus) progress() string {
	for w, wave := range st.Waves {
		switch wave.State {
		case RolloutWaveRunning:
			return fmt.Sprintf("wave %d of %d: %d of %d tenants done, %d running", w+1, len(st.Waves), st.doneIn(w), wave.Size, st.Counts.Running)
		case RolloutWaveSoaking:
			return fmt.Sprintf("wave %d of %d: soaking until %s", w+1, len(st.Waves), wave.SoakUntil.UTC().Format(time.RFC3339))
		}
	}
	return "starting"
}

func (st *RolloutStatus) doneIn(w int) int {
	n := 0
	for _, t := range st.Tenants {
		if t.Wave == w && (t.State == RolloutTenantDone || t.State == RolloutTenantSkipped) {
			n++
		}
	}
	return n
}

// CurrentWave is the index of the first wave not done; len(Waves) when all are.
func (st *RolloutStatus) CurrentWave() int {
	for w, wave := range st.Waves {
		if wave.State != RolloutWaveDone {
			return w
		}
	}
	return len(st.Waves)
}

func cloneRolloutStatus(s RolloutStatus) RolloutStatus {
	s.Waves = slices.Clone(s.Waves)
	for i := range s.Waves {
		if w := s.Waves[i].Wait; w != nil {
			c := *w
			s.Waves[i].Wait = &c
		}
	}
	s.Tenants = slices.Clone(s.Tenants)
	if s.Halt != nil {
		h := *s.Halt
		s.Halt = &h
	}
	return s
}

func ptrTime(t time.Time) *time.Time { return &t }

func clipMessage(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
