package domain

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RolloutKind is one change rolled across many tenants in waves: a Talos
// version, a Kubernetes version, a config patch or a rotation of secrets, to the tenants a label
// selector picks, wave after wave, each wave followed by a soak during which
// its tenants must stay healthy. A failed or unhealthy tenant halts it. The
// rollout controller (controllers/rollout) carries it out through each tenant's own
// Upgrade or ConfigPatch, so every tenant's maintenance windows, drains and
// checks hold as for a change made by hand.
var RolloutKind = register(&KindInfo{
	Kind: "Rollout", Plural: "rollouts", Subject: "rollout",
	NormalizeSpec:   func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[RolloutSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[RolloutStatus](raw, "status") },
	InitialStatus:   func() json.RawMessage { return json.RawMessage(`{"phase":"Pending"}`) },
})

// Rollout is the typed view of a Rollout object.
type Rollout struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   ObjectMeta    `json:"metadata"`
	Spec       RolloutSpec   `json:"spec"`
	Status     RolloutStatus `json:"status"`
}

// Rollout phases. Succeeded and Aborted are final.
const (
	RolloutPending     = "Pending"
	RolloutProgressing = "Progressing"
	RolloutPaused      = "Paused"
	RolloutHalted      = "Halted"
	RolloutAborted     = "Aborted"
	RolloutSucceeded   = "Succeeded"
)

// States of one tenant in a rollout. Done, Failed and Skipped end a
// tenant's part; a resumed rollout starts a Failed tenant again.
const (
	// RolloutTenantWaiting: its wave has not reached it yet.
	RolloutTenantWaiting = "Waiting"
	// RolloutTenantRunning: its Upgrade or config change is under way (or
	// waits for the tenant's maintenance window).
	RolloutTenantRunning = "Running"
	RolloutTenantDone    = "Done"
	RolloutTenantFailed  = "Failed"
	// RolloutTenantSkipped: the tenant was deleted before its turn.
	RolloutTenantSkipped = "Skipped"
)

// States of a wave.
const (
	RolloutWaveWaiting = "Waiting"
	RolloutWaveRunning = "Running"
	RolloutWaveSoaking = "Soaking"
	RolloutWaveDone    = "Done"
)

// Bounds of a rollout.
const (
	MaxRolloutWaves = 20
	// MaxRolloutTenants keeps a rollout's status (every tenant's part, each
	// message clipped to MaxRolloutMessage) well inside one event (2 MiB).
	MaxRolloutTenants = 2000
	MaxRolloutMessage = 240
	MaxRolloutSoak    = 7 * 24 * time.Hour
	// LabelRollout names the rollout on the Upgrades and ConfigPatches it writes.
	LabelRollout = "rezuscloud.io/rollout"
)

// RolloutSpec says what changes, where, and how fast.
type RolloutSpec struct {
	// Change is what every selected tenant gets: exactly one of its fields.
	Change RolloutChange `json:"change"`
	// TenantSelector picks the tenants by label ("env=prod"); empty: every
	// tenant. The tenants are fixed when the rollout starts, in name order.
	TenantSelector string `json:"tenantSelector,omitempty"`
	// Waves split the tenants; the last wave is always {percent: 100}.
	// Default: a canary then the rest, [{tenants: 1}, {percent: 100}].
	Waves []RolloutWave `json:"waves"`
	// Soak is how long each wave's tenants must stay healthy after the
	// wave's last tenant is done, before the next wave starts; default 10m.
	Soak string `json:"soak"`
	// Paused stops new tenants from starting (rezusctl rollout pause);
	// changes under way go on.
	Paused bool `json:"paused,omitempty"`
	// ResumeHalt is the number of the last halt the user resumed from
	// (rezusctl rollout resume sets it to status.halt.number): its failed
	// tenants start again and the rollout goes on.
	ResumeHalt int `json:"resumeHalt,omitempty"`
	// Abort ends the rollout for good (rezusctl rollout abort): nothing
	// new starts and the Upgrades under way stop after their current machine.
	Abort bool `json:"abort,omitempty"`
	// ProgressDeadline is how long a wave may go without one of its
	// running tenants finishing its change (as a Deployment's
	// progressDeadlineSeconds): past it the rollout halts, naming what the
	// wave waited for and the last answer. Time in which every running
	// tenant waits for its maintenance window does not count. A Go
	// duration between 10s and 24h; default (absent) 6h.
	ProgressDeadline string `json:"progressDeadline,omitempty"`
}

// RolloutChange is what a rollout changes on each tenant.
type RolloutChange struct {
	// TalosVersion upgrades every machine of the tenant to it (an Upgrade).
	TalosVersion string `json:"talosVersion,omitempty"`
	// KubernetesVersion upgrades the tenant's Kubernetes to it (an Upgrade).
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// ConfigPatch is added to every tenant, or updated where it exists.
	ConfigPatch *RolloutConfigPatch `json:"configPatch,omitempty"`
	// Rotate rotates these secrets of every tenant (an Upgrade with
	// spec.rotate, the same values: talos-ca, kubernetes-ca, aggregator-ca,
	// bootstrap-token or all). A tenant is done when its rotation succeeded:
	// there is no version to find it at already.
	Rotate []string `json:"rotate,omitempty"`
}

// RolloutConfigPatch is a ConfigPatch written to each tenant.
type RolloutConfigPatch struct {
	Name string          `json:"name"`
	Spec ConfigPatchSpec `json:"spec"`
}

// RolloutWave is one step of a rollout: Tenants more tenants, or as many
// as bring the tenants reached so far to Percent of all (at least one).
type RolloutWave struct {
	Tenants int `json:"tenants,omitempty"`
	Percent int `json:"percent,omitempty"`
	// MaxParallel is how many of the wave's tenants change at once;
	// default every tenant of the wave.
	MaxParallel int `json:"maxParallel,omitempty"`
}

// Default fills in the waves and the soak, and the change's defaults.
func (s *RolloutSpec) Default() {
	if len(s.Waves) == 0 {
		s.Waves = []RolloutWave{{Tenants: 1}, {Percent: 100}}
	}
	if s.Soak == "" {
		s.Soak = "10m"
	}
	if _, ok := ParseVersion(s.Change.TalosVersion); ok {
		s.Change.TalosVersion = canonicalVersion(s.Change.TalosVersion)
	}
	if _, ok := ParseVersion(s.Change.KubernetesVersion); ok {
		s.Change.KubernetesVersion = canonicalVersion(s.Change.KubernetesVersion)
	}
	if p := s.Change.ConfigPatch; p != nil {
		p.Spec.Default()
	}
	s.Change.Rotate = normalizeRotate(s.Change.Rotate)
}

// Validate reports every bad field.
func (s *RolloutSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	var causes []Cause
	c := s.Change
	n := 0
	for _, set := range []bool{c.TalosVersion != "", c.KubernetesVersion != "", c.ConfigPatch != nil, len(c.Rotate) > 0} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		causes = append(causes, Cause{Field: f.Child("change").String(), Type: CauseRequired,
			Message: "give what changes: talosVersion, kubernetesVersion, configPatch or rotate"})
	case n > 1:
		causes = append(causes, Cause{Field: f.Child("change").String(), Type: CauseForbidden,
			Message: "a rollout makes one change: give one of talosVersion, kubernetesVersion, configPatch and rotate (create one rollout per change)"})
	}
	causes = append(causes, validateRotate(c.Rotate, f.Child("change", "rotate"))...)
	if c.TalosVersion != "" {
		causes = append(causes, validateVersion(c.TalosVersion, f.Child("change", "talosVersion"))...)
	}
	if c.KubernetesVersion != "" {
		causes = append(causes, validateVersion(c.KubernetesVersion, f.Child("change", "kubernetesVersion"))...)
	}
	if p := c.ConfigPatch; p != nil {
		causes = append(causes, ValidateName(p.Name, f.Child("change", "configPatch", "name").String())...)
		causes = append(causes, p.Spec.validate(f.Child("change", "configPatch", "spec"))...)
	}
	if s.TenantSelector != "" {
		if len(s.TenantSelector) > 1024 {
			causes = append(causes, Cause{Field: f.Child("tenantSelector").String(), Type: CauseTooLong, Message: "must be no more than 1024 characters"})
		} else if _, err := ParseSelector(s.TenantSelector); err != nil {
			causes = append(causes, Cause{Field: f.Child("tenantSelector").String(), Type: CauseInvalid, Message: err.Error()})
		}
	}
	causes = append(causes, validateWaves(s.Waves, f.Child("waves"))...)
	if d, err := time.ParseDuration(s.Soak); err != nil {
		causes = append(causes, Cause{Field: f.Child("soak").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not a duration (e.g. 30m)", s.Soak)})
	} else if d < 0 || d > MaxRolloutSoak {
		causes = append(causes, Cause{Field: f.Child("soak").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 0s and %s, got %s", MaxRolloutSoak, s.Soak)})
	}
	causes = append(causes, ValidateStepDeadline(s.ProgressDeadline, f.Child("progressDeadline"))...)
	if s.ResumeHalt < 0 {
		causes = append(causes, Cause{Field: f.Child("resumeHalt").String(), Type: CauseInvalid, Message: "must not be negative"})
	}
	return causes
}

func validateWaves(waves []RolloutWave, f *field.Path) []Cause {
	var causes []Cause
	if len(waves) > MaxRolloutWaves {
		return []Cause{{Field: f.String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d waves", MaxRolloutWaves)}}
	}
	last := 0
	for i, w := range waves {
		p := f.Index(i)
		switch {
		case (w.Tenants == 0) == (w.Percent == 0):
			causes = append(causes, Cause{Field: p.String(), Type: CauseInvalid, Message: "give the wave's size as tenants (a count) or percent (of all the rollout's tenants, counted from the start), not both"})
		case w.Tenants < 0 || w.Tenants > MaxRolloutTenants:
			causes = append(causes, Cause{Field: p.Child("tenants").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 1 and %d, got %d", MaxRolloutTenants, w.Tenants)})
		case w.Percent < 0 || w.Percent > 100:
			causes = append(causes, Cause{Field: p.Child("percent").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 1 and 100, got %d", w.Percent)})
		case w.Percent > 0 && w.Percent <= last:
			causes = append(causes, Cause{Field: p.Child("percent").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be more than the %d%% an earlier wave reaches: percent counts every tenant reached so far", last)})
		}
		if w.Percent > 0 {
			last = w.Percent
		}
		if w.MaxParallel < 0 || w.MaxParallel > MaxRolloutTenants {
			causes = append(causes, Cause{Field: p.Child("maxParallel").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 1 and %d, got %d", MaxRolloutTenants, w.MaxParallel)})
		}
	}
	if n := len(waves); n > 0 && waves[n-1].Percent != 100 {
		causes = append(causes, Cause{Field: f.Index(n - 1).String(), Type: CauseInvalid, Message: "the last wave must be {percent: 100}, so that every selected tenant is reached"})
	}
	return causes
}

// ParseWaves reads waves written as "1,25%,100%": a count of tenants, or a
// percentage of all the rollout's tenants reached by the end of the wave;
// each wave gets maxParallel (0: the whole wave).
func ParseWaves(s string, maxParallel int) ([]RolloutWave, error) {
	var out []RolloutWave
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		w := RolloutWave{MaxParallel: maxParallel}
		pct, isPct := strings.CutSuffix(part, "%")
		n, err := strconv.Atoi(pct)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("waves: %q is neither a tenant count nor a percentage (e.g. 1,25%%,100%%)", part)
		}
		if isPct {
			w.Percent = n
		} else {
			w.Tenants = n
		}
		out = append(out, w)
	}
	return out, nil
}

// FormatWaves writes waves as ParseWaves reads them.
func FormatWaves(waves []RolloutWave) string {
	parts := make([]string, len(waves))
	for i, w := range waves {
		if w.Percent > 0 {
			parts[i] = strconv.Itoa(w.Percent) + "%"
		} else {
			parts[i] = strconv.Itoa(w.Tenants)
		}
	}
	return strings.Join(parts, ",")
}

// SoakDuration is spec.soak as a duration.
func (s *RolloutSpec) SoakDuration() time.Duration {
	d, _ := time.ParseDuration(s.Soak)
	return d
}

// WaveSizes splits n tenants over the waves: the size of each, in order.
// A tenants wave takes that many (or what is left); a percent wave takes as
// many as bring the total to ceil(percent·n/100), and at least one while
// any is left; the last wave takes the rest.
func (s *RolloutSpec) WaveSizes(n int) []int {
	sizes := make([]int, len(s.Waves))
	reached := 0
	for i, w := range s.Waves {
		k := w.Tenants
		if w.Percent > 0 {
			k = (w.Percent*n+99)/100 - reached
			if k < 1 {
				k = 1
			}
		}
		if i == len(s.Waves)-1 || k > n-reached {
			k = n - reached
		}
		sizes[i] = k
		reached += k
	}
	return sizes
}

// Description says what the rollout changes, in words.
func (c *RolloutChange) Description() string {
	switch {
	case c.TalosVersion != "":
		return "Talos " + c.TalosVersion
	case c.KubernetesVersion != "":
		return "Kubernetes " + c.KubernetesVersion
	case c.ConfigPatch != nil:
		return "config patch " + c.ConfigPatch.Name
	case len(c.Rotate) > 0:
		return "rotation of " + strings.Join(c.Rotate, ", ")
	}
	return ""
}

// RolloutStatus is the rollout's progress, per wave and per tenant.
type RolloutStatus struct {
	Phase              string `json:"phase"`
	Message            string `json:"message,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	// Waves, in order, once the tenants are fixed.
	Waves []RolloutWaveStatus `json:"waves,omitempty"`
	// Tenants, wave by wave and by name within a wave.
	Tenants []RolloutTenantStatus `json:"tenants,omitempty"`
	// Halt is why the rollout stopped, while it is Halted (and after, until
	// the next halt, with Resumed set).
	Halt *RolloutHalt `json:"halt,omitempty"`
	// Counts summarises the tenants' states.
	Counts     RolloutCounts `json:"counts,omitzero"`
	StartedAt  *time.Time    `json:"startedAt,omitempty"`
	FinishedAt *time.Time    `json:"finishedAt,omitempty"`
}

// RolloutWaveStatus is one wave's progress.
type RolloutWaveStatus struct {
	Size  int    `json:"size"`
	State string `json:"state"`
	// SoakUntil is when the wave's soak ends (while Soaking).
	SoakUntil  *time.Time `json:"soakUntil,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	// Wait is what the wave waits for, while it does: its running tenants
	// to finish their change (by spec.progressDeadline), or, Soaking, its
	// tenants to stay healthy until SoakUntil (a wait whose end is
	// success). Render it with WaitMessage. Records written before it
	// existed have none and read as before.
	Wait *StepWait `json:"wait,omitempty"`
}

// RolloutTenantStatus is one tenant's part.
type RolloutTenantStatus struct {
	Name  string `json:"name"`
	Wave  int    `json:"wave"`
	State string `json:"state"`
	// Attempt counts the starts: a resumed rollout starts a failed tenant
	// again as attempt 2, under a new Upgrade name.
	Attempt int `json:"attempt,omitempty"`
	// Message says what the tenant waits for, or why it failed.
	Message    string     `json:"message,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
}

// RolloutHalt is why a rollout halted.
type RolloutHalt struct {
	// Number counts the rollout's halts, from 1.
	Number int       `json:"number"`
	Tenant string    `json:"tenant"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Resumed is set once the user resumed from this halt.
	Resumed bool `json:"resumed,omitempty"`
}

// RolloutCounts counts the rollout's tenants by state.
type RolloutCounts struct {
	Total   int `json:"total,omitempty"`
	Waiting int `json:"waiting,omitempty"`
	Running int `json:"running,omitempty"`
	Done    int `json:"done,omitempty"`
	Failed  int `json:"failed,omitempty"`
	Skipped int `json:"skipped,omitempty"`
}

// Default fills the phase in.
func (s *RolloutStatus) Default() {
	if s.Phase == "" {
		s.Phase = RolloutPending
	}
}

// Validate checks the status a controller wrote.
func (s *RolloutStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Phase, f.Child("phase"), RolloutPending, RolloutProgressing, RolloutPaused, RolloutHalted, RolloutAborted, RolloutSucceeded)
	if len(s.Tenants) > MaxRolloutTenants {
		causes = append(causes, Cause{Field: f.Child("tenants").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d tenants", MaxRolloutTenants)})
	}
	if len(s.Waves) > MaxRolloutWaves {
		causes = append(causes, Cause{Field: f.Child("waves").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d waves", MaxRolloutWaves)})
	}
	if len(s.Message) > 4096 {
		causes = append(causes, Cause{Field: f.Child("message").String(), Type: CauseTooLong, Message: "must be no more than 4096 characters"})
	}
	for i := range s.Waves {
		if w := s.Waves[i].Wait; w != nil {
			causes = append(causes, w.Validate(f.Child("waves").Index(i).Child("wait"))...)
		}
	}
	return causes
}

// Finished reports whether the rollout is over.
func (s *RolloutStatus) Finished() bool {
	return s.Phase == RolloutSucceeded || s.Phase == RolloutAborted
}

// Halted reports whether the rollout is halted and not yet resumed.
func (s *RolloutStatus) Halted() bool { return s.Halt != nil && !s.Halt.Resumed }
