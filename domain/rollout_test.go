package domain

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRolloutWaveSizes(t *testing.T) {
	tests := []struct {
		waves []RolloutWave
		n     int
		want  []int
	}{
		{[]RolloutWave{{Tenants: 1}, {Percent: 50}, {Percent: 100}}, 6, []int{1, 2, 3}},
		{[]RolloutWave{{Tenants: 1}, {Percent: 25}, {Percent: 100}}, 1000, []int{1, 249, 750}},
		{[]RolloutWave{{Tenants: 1}, {Percent: 50}, {Percent: 100}}, 2, []int{1, 1, 0}},
		{[]RolloutWave{{Tenants: 1}, {Percent: 50}, {Percent: 100}}, 1, []int{1, 0, 0}},
		{[]RolloutWave{{Tenants: 5}, {Percent: 100}}, 3, []int{3, 0}},
		{[]RolloutWave{{Percent: 10}, {Percent: 100}}, 7, []int{1, 6}},
		{[]RolloutWave{{Percent: 100}}, 4, []int{4}},
	}
	for _, tt := range tests {
		s := RolloutSpec{Waves: tt.waves}
		assert.Equal(t, tt.want, s.WaveSizes(tt.n), "%+v over %d", tt.waves, tt.n)
	}
}

func TestRolloutSpecValidation(t *testing.T) {
	tests := []struct {
		name, spec string
		fields     []string
	}{
		{"talos", `{"change":{"talosVersion":"1.13.1"}}`, nil},
		{"patch", `{"change":{"configPatch":{"name":"ntp","spec":{"patch":"machine: {}"}}},"waves":[{"tenants":2,"maxParallel":1},{"percent":40},{"percent":100}],"soak":"30m"}`, nil},
		{"no change", `{}`, []string{"spec.change"}},
		{"two changes", `{"change":{"talosVersion":"v1.13.1","kubernetesVersion":"v1.36.1"}}`, []string{"spec.change"}},
		{"bad version", `{"change":{"talosVersion":"latest"}}`, []string{"spec.change.talosVersion"}},
		{"bad patch", `{"change":{"configPatch":{"name":"Bad_Name","spec":{"patch":""}}}}`, []string{"spec.change.configPatch.name", "spec.change.configPatch.spec.patch"}},
		{"bad selector", `{"change":{"talosVersion":"v1.13.1"},"tenantSelector":"a in ()"}`, []string{"spec.tenantSelector"}},
		{"wave both", `{"change":{"talosVersion":"v1.13.1"},"waves":[{"tenants":1,"percent":5},{"percent":100}]}`, []string{"spec.waves[0]"}},
		{"wave neither", `{"change":{"talosVersion":"v1.13.1"},"waves":[{},{"percent":100}]}`, []string{"spec.waves[0]"}},
		{"percent backwards", `{"change":{"talosVersion":"v1.13.1"},"waves":[{"percent":50},{"percent":20},{"percent":100}]}`, []string{"spec.waves[1].percent"}},
		{"last not 100", `{"change":{"talosVersion":"v1.13.1"},"waves":[{"tenants":1},{"percent":50}]}`, []string{"spec.waves[1]"}},
		{"negative parallel", `{"change":{"talosVersion":"v1.13.1"},"waves":[{"percent":100,"maxParallel":-1}]}`, []string{"spec.waves[0].maxParallel"}},
		{"soak", `{"change":{"talosVersion":"v1.13.1"},"soak":"forever"}`, []string{"spec.soak"}},
		{"soak long", `{"change":{"talosVersion":"v1.13.1"},"soak":"200h"}`, []string{"spec.soak"}},
		{"unknown field", `{"change":{"talosVersion":"v1.13.1"},"wave":[]}`, []string{"spec.wave"}},
		{"progress deadline", `{"change":{"talosVersion":"v1.13.1"},"progressDeadline":"2h"}`, nil},
		{"progress deadline too short", `{"change":{"talosVersion":"v1.13.1"},"progressDeadline":"5s"}`, []string{"spec.progressDeadline"}},
		{"progress deadline not a duration", `{"change":{"talosVersion":"v1.13.1"},"progressDeadline":"soon"}`, []string{"spec.progressDeadline"}},
		{"rotate", `{"change":{"rotate":["kubernetes-ca","talos-ca"]}}`, nil},
		{"rotate all", `{"change":{"rotate":["all"]}}`, nil},
		{"rotate and a version", `{"change":{"rotate":["talos-ca"],"talosVersion":"v1.13.1"}}`, []string{"spec.change"}},
		{"rotate refused", `{"change":{"rotate":["kubernetes-ca","etcd-ca"]}}`, []string{"spec.change.rotate[1]"}},
		{"rotate unknown", `{"change":{"rotate":["dns"]}}`, []string{"spec.change.rotate[0]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, causes := RolloutKind.NormalizeSpec(json.RawMessage(tt.spec))
			var fields []string
			for _, c := range causes {
				fields = append(fields, c.Field)
			}
			assert.ElementsMatch(t, tt.fields, fields, "%v", causes)
			if len(tt.fields) == 0 {
				var s RolloutSpec
				require.NoError(t, json.Unmarshal(out, &s))
				assert.NotEmpty(t, s.Waves)
				assert.NotEmpty(t, s.Soak)
			}
		})
	}
	many := RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"}, Waves: make([]RolloutWave, MaxRolloutWaves+1), Soak: "1m"}
	assert.Equal(t, "spec.waves", many.Validate("spec")[0].Field)

	// A rotation is spec.rotate's values, in the order an Upgrade takes them;
	// a refused secret says why, as an Upgrade's does.
	rot := RolloutSpec{Change: RolloutChange{Rotate: []string{SecretKubernetesCA, SecretTalosCA, SecretKubernetesCA}}}
	rot.Default()
	assert.Equal(t, []string{SecretTalosCA, SecretKubernetesCA}, rot.Change.Rotate)
	assert.Equal(t, "rotation of talos-ca, kubernetes-ca", rot.Change.Description())
	rot.Change.Rotate = []string{SecretServiceAccountKey}
	causes := rot.Validate("spec")
	require.Len(t, causes, 1)
	assert.Contains(t, causes[0].Message, "service-account-key cannot be rotated: Talos's config holds one service-account key")
}

// rolloutSim steps a rollout through DecideRollout as the controller would.
type rolloutSim struct {
	t    *testing.T
	spec RolloutSpec
	st   RolloutStatus
	obs  map[string]RolloutObservation
	now  time.Time
	sel  []string
	// unlooked are tenants the controller did not look at.
	unlooked map[string]bool
}

func newRolloutSim(t *testing.T, n int, spec RolloutSpec) *rolloutSim {
	s := &rolloutSim{t: t, spec: spec, obs: map[string]RolloutObservation{}, unlooked: map[string]bool{}, now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	s.spec.Default()
	require.Empty(t, s.spec.Validate("spec"))
	for i := range n {
		s.sel = append(s.sel, fmt.Sprintf("t%d", i+1))
	}
	s.st.Default()
	return s
}

func (s *rolloutSim) step() RolloutDecision {
	for _, name := range s.sel {
		o := s.obs[name]
		if !s.unlooked[name] {
			o.Looked = true
		}
		s.obs[name] = o
	}
	d := DecideRollout(RolloutInput{Spec: s.spec, Generation: 1, Status: s.st, Selected: s.sel, Observed: s.obs, Now: s.now})
	require.Empty(s.t, d.Status.Validate("status"))
	s.st = d.Status
	return d
}

func (s *rolloutSim) states() string {
	var b strings.Builder
	for i, t := range s.st.Tenants {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%s", t.Name, t.State[:1])
	}
	return b.String()
}

func (s *rolloutSim) set(tenant, change string) {
	o := s.obs[tenant]
	o.Change = change
	s.obs[tenant] = o
}

func starts(d RolloutDecision) []string {
	var out []string
	for _, s := range d.Start {
		out = append(out, fmt.Sprintf("%s#%d", s.Tenant, s.Attempt))
	}
	return out
}

// TestRolloutWavesCanaryFirst walks 6 tenants through waves 1 / 50% / 100%
// with a soak: the canary alone, then the next two after its soak, then the
// rest; a failure in wave 2 halts it with that tenant named and starts
// nothing of wave 3; a resume starts the failed tenant again.
func TestRolloutWavesCanaryFirst(t *testing.T) {
	s := newRolloutSim(t, 6, RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"},
		Waves: []RolloutWave{{Tenants: 1}, {Percent: 50}, {Percent: 100}}, Soak: "10m"})
	d := s.step()
	assert.Equal(t, []string{"t1#1"}, starts(d))
	assert.Equal(t, RolloutProgressing, s.st.Phase)
	assert.Equal(t, "t1:R t2:W t3:W t4:W t5:W t6:W", s.states())
	assert.Equal(t, []int{1, 2, 3}, []int{s.st.Waves[0].Size, s.st.Waves[1].Size, s.st.Waves[2].Size})

	// Nothing new while the canary runs; a stored Running tenant whose
	// change is not yet observed stays Running (the controller writes it again).
	assert.Empty(t, s.step().Start)
	s.set("t1", RolloutTenantRunning)
	assert.Empty(t, s.step().Start)

	s.set("t1", RolloutTenantDone)
	d = s.step()
	assert.Empty(t, d.Start)
	assert.Equal(t, RolloutWaveSoaking, s.st.Waves[0].State)
	assert.Equal(t, s.now.Add(10*time.Minute), d.RecheckAt)
	assert.Contains(t, s.st.Message, "soaking")

	// Healthy during the soak; the soak ends; wave 2 starts both at once.
	s.obs["t1"] = RolloutObservation{Change: RolloutTenantDone, Health: HealthReady}
	s.now = s.now.Add(9 * time.Minute)
	assert.Empty(t, s.step().Start)
	s.now = s.now.Add(time.Minute)
	d = s.step()
	assert.Equal(t, []string{"t2#1", "t3#1"}, starts(d))
	assert.Equal(t, RolloutWaveDone, s.st.Waves[0].State)

	// t3 fails: halted with t3 named, wave 3 untouched, even after t2 is done.
	s.set("t2", RolloutTenantDone)
	s.obs["t3"] = RolloutObservation{Change: RolloutTenantFailed, Message: "cp-0: upgrade refused"}
	d = s.step()
	assert.Empty(t, d.Start)
	assert.Equal(t, RolloutHalted, s.st.Phase)
	require.NotNil(t, s.st.Halt)
	assert.Equal(t, "t3", s.st.Halt.Tenant)
	assert.Equal(t, 1, s.st.Halt.Number)
	assert.Contains(t, s.st.Message, "t3")
	assert.Contains(t, s.st.Halt.Reason, "upgrade refused")
	s.now = s.now.Add(time.Hour)
	assert.Empty(t, s.step().Start)
	assert.Equal(t, "t1:D t2:D t3:F t4:W t5:W t6:W", s.states())

	// Resume: t3 starts again as attempt 2; wave 2 soaks; wave 3 goes.
	s.spec.ResumeHalt = 1
	s.obs["t3"] = RolloutObservation{}
	d = s.step()
	assert.Equal(t, []string{"t3#2"}, starts(d))
	assert.True(t, s.st.Halt.Resumed)
	assert.Equal(t, RolloutProgressing, s.st.Phase)
	s.set("t3", RolloutTenantDone)
	s.step()
	assert.Equal(t, RolloutWaveSoaking, s.st.Waves[1].State)
	s.now = s.now.Add(10 * time.Minute)
	d = s.step()
	assert.Equal(t, []string{"t4#1", "t5#1", "t6#1"}, starts(d))
	for _, n := range []string{"t4", "t5", "t6"} {
		s.set(n, RolloutTenantDone)
	}
	s.step()
	s.now = s.now.Add(10 * time.Minute)
	s.step()
	assert.Equal(t, RolloutSucceeded, s.st.Phase)
	assert.Equal(t, RolloutCounts{Total: 6, Done: 6}, s.st.Counts)
	assert.NotNil(t, s.st.FinishedAt)
	// Final: nothing moves it any more.
	s.obs["t1"] = RolloutObservation{Gone: true}
	assert.Equal(t, s.st, s.step().Status)
}

func TestRolloutHaltsOnAnUnhealthyTenantDuringItsSoak(t *testing.T) {
	s := newRolloutSim(t, 3, RolloutSpec{Change: RolloutChange{KubernetesVersion: "v1.36.1"}, Soak: "30m"})
	s.step()
	s.set("t1", RolloutTenantDone)
	s.step()
	// A probe from before the change ended is not counted ("" health).
	s.step()
	assert.Equal(t, RolloutProgressing, s.st.Phase)
	s.obs["t1"] = RolloutObservation{Change: RolloutTenantDone, Health: HealthDegraded, HealthReason: "cp-0: etcd unhealthy"}
	s.step()
	assert.Equal(t, RolloutHalted, s.st.Phase)
	assert.Equal(t, "t1", s.st.Halt.Tenant)
	assert.Contains(t, s.st.Halt.Reason, "etcd unhealthy")
	// The soak's end does not move a halted rollout.
	s.now = s.now.Add(time.Hour)
	assert.Empty(t, s.step().Start)
	// Resumed while still unhealthy: halted again, as number 2.
	s.spec.ResumeHalt = 1
	s.step()
	assert.Equal(t, RolloutHalted, s.st.Phase)
	assert.Equal(t, 2, s.st.Halt.Number)
	// Healthy again and resumed: the soak ends, the rest starts.
	s.obs["t1"] = RolloutObservation{Change: RolloutTenantDone, Health: HealthReady}
	s.spec.ResumeHalt = 2
	d := s.step()
	assert.Equal(t, []string{"t2#1", "t3#1"}, starts(d))
}

func TestRolloutParallelismPauseAndSkips(t *testing.T) {
	s := newRolloutSim(t, 5, RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"},
		Waves: []RolloutWave{{Percent: 100, MaxParallel: 2}}, Soak: "0s"})
	s.obs["t2"] = RolloutObservation{AtTarget: true}
	s.obs["t4"] = RolloutObservation{Gone: true}
	d := s.step()
	// t2 is at the target, t4 deleted: the first two others start.
	assert.Equal(t, []string{"t1#1", "t3#1"}, starts(d))
	assert.Equal(t, "t1:R t2:D t3:R t4:S t5:W", s.states())
	s.spec.Paused = true
	s.set("t1", RolloutTenantDone)
	d = s.step()
	assert.Empty(t, d.Start)
	assert.Equal(t, RolloutPaused, s.st.Phase)
	s.spec.Paused = false
	d = s.step()
	assert.Equal(t, []string{"t5#1"}, starts(d))
	s.set("t3", RolloutTenantDone)
	s.set("t5", RolloutTenantDone)
	s.step()
	assert.Equal(t, RolloutSucceeded, s.st.Phase, s.st.Message)
	assert.Equal(t, RolloutCounts{Total: 5, Done: 4, Skipped: 1}, s.st.Counts)
}

func TestRolloutAbortCancelsWhatRuns(t *testing.T) {
	s := newRolloutSim(t, 4, RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"},
		Waves: []RolloutWave{{Tenants: 2}, {Percent: 100}}})
	s.step()
	s.spec.Abort = true
	d := s.step()
	assert.Equal(t, []string{"t1", "t2"}, d.Cancel)
	assert.Equal(t, RolloutAborted, s.st.Phase)
	assert.Empty(t, s.step().Cancel, "an aborted rollout is final")
}

func TestRolloutWithNothingSelected(t *testing.T) {
	s := newRolloutSim(t, 0, RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"}})
	s.step()
	assert.Equal(t, RolloutSucceeded, s.st.Phase)
	assert.Equal(t, "no tenant matches the selector", s.st.Message)

	s = newRolloutSim(t, MaxRolloutTenants+1, RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"}})
	s.step()
	assert.Equal(t, RolloutAborted, s.st.Phase)
	assert.Contains(t, s.st.Message, "at most")
}

// The tenants are fixed at the start: a tenant labelled later is not taken in.
func TestRolloutTenantsAreFixedAtTheStart(t *testing.T) {
	s := newRolloutSim(t, 2, RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"}})
	s.step()
	s.sel = append(s.sel, "t9")
	s.step()
	assert.Len(t, s.st.Tenants, 2)
}

func TestParseWaves(t *testing.T) {
	w, err := ParseWaves("1, 25%,100%", 3)
	require.NoError(t, err)
	assert.Equal(t, []RolloutWave{{Tenants: 1, MaxParallel: 3}, {Percent: 25, MaxParallel: 3}, {Percent: 100, MaxParallel: 3}}, w)
	assert.Equal(t, "1,25%,100%", FormatWaves(w))
	for _, bad := range []string{"", "a", "0", "1,,100%", "-5%"} {
		_, err := ParseWaves(bad, 0)
		assert.Error(t, err, bad)
	}
}

// A waiting tenant the controller did not look at is not started, nor any
// after it in the wave: the order holds and a round's cost stays bounded.
func TestRolloutStartsOnlyLookedAtTenants(t *testing.T) {
	s := newRolloutSim(t, 5, RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"}, Waves: []RolloutWave{{Percent: 100}}, Soak: "0s"})
	s.unlooked["t3"] = true
	assert.Equal(t, []string{"t1#1", "t2#1"}, starts(s.step()))
	delete(s.unlooked, "t3")
	assert.Equal(t, []string{"t3#1", "t4#1", "t5#1"}, starts(s.step()))
}

// A tenant's message is clipped, so that 2,000 tenants' parts fit an event.
func TestRolloutMessagesAreClipped(t *testing.T) {
	s := newRolloutSim(t, 1, RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"}, Waves: []RolloutWave{{Percent: 100}}})
	s.step()
	s.obs["t1"] = RolloutObservation{Change: RolloutTenantRunning, Message: strings.Repeat("é", 4096)}
	s.step()
	assert.LessOrEqual(t, len(s.st.Tenants[0].Message), MaxRolloutMessage)
	assert.True(t, utf8.ValidString(s.st.Tenants[0].Message))
}
