package domain

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestBeginWaitKeepsTheDeadlineOfTheSameWait(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	first := BeginWait(nil, "kube-apiserver on cp-1 to answer v1.35.5", t0, 10*time.Minute)
	require.Equal(t, t0, first.Since)
	require.Equal(t, t0.Add(10*time.Minute), first.Deadline)

	// Resumed after a restart four minutes later: same start, same deadline.
	resumed := BeginWait(&first, "kube-apiserver on cp-1 to answer v1.35.5", t0.Add(4*time.Minute), 10*time.Minute)
	require.Equal(t, first.Since, resumed.Since)
	require.Equal(t, first.Deadline, resumed.Deadline)

	// Another wait starts its own clock.
	other := BeginWait(&first, "cp-1 to be back on v1.35.4", t0.Add(5*time.Minute), time.Minute)
	require.Equal(t, t0.Add(5*time.Minute), other.Since)
	require.Equal(t, t0.Add(6*time.Minute), other.Deadline)
}

func TestWaitChanged(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	base := BeginWait(nil, "x", t0, time.Minute)
	at := func(err string, d time.Duration) StepWait {
		w := base
		w.Observe(err, t0.Add(d))
		return w
	}
	seen := at("connection refused", time.Second)
	for _, tc := range []struct {
		name string
		prev *StepWait
		next StepWait
		want bool
	}{
		{"nothing recorded", nil, base, true},
		{"first answer", &base, at("connection refused", time.Second), true},
		{"same answer", &seen, at("connection refused", time.Minute), false},
		{"another answer too soon", &seen, at("503", 5*time.Second), false},
		{"another answer later", &seen, at("503", time.Second+WaitRecordEvery), true},
		{"another wait", &seen, BeginWait(nil, "y", t0, time.Minute), true},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, WaitChanged(tc.prev, tc.next)) })
	}
}

func TestStepWaitMessage(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	w := BeginWait(nil, "kube-apiserver on cp-1 to answer v1.35.5", t0, 10*time.Minute)
	require.Equal(t, "waiting for kube-apiserver on cp-1 to answer v1.35.5, 0s (fails in 10m)", w.Message(t0))
	w.Observe("connection refused", t0.Add(4*time.Minute))
	require.Equal(t, "waiting for kube-apiserver on cp-1 to answer v1.35.5: connection refused, 4m10s (fails in 5m50s)", w.Message(t0.Add(250*time.Second)))
	require.True(t, strings.HasSuffix(w.Message(t0.Add(11*time.Minute)), "(past its deadline)"))
	require.False(t, w.Expired(t0.Add(10*time.Minute-time.Second)))
	require.True(t, w.Expired(t0.Add(10*time.Minute)))
	require.Equal(t, "Verifying passed its deadline of 10m waiting for kube-apiserver on cp-1 to answer v1.35.5; last answer: connection refused",
		w.DeadlineProblem("Verifying"))
	var none *StepWait
	require.Empty(t, none.Message(t0))
}

func TestStepDeadlineBounds(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{{"", true}, {"10s", true}, {"24h", true}, {"9s", false}, {"25h", false}, {"soon", false}} {
		t.Run(tc.v, func(t *testing.T) {
			require.Equal(t, tc.ok, ValidateStepDeadline(tc.v, field.NewPath("spec", "deadlines", "verify")) == nil)
		})
	}
	u := UpgradeSpec{KubernetesVersion: "v1.36.1", MaxParallelism: 1, Deadlines: &UpgradeDeadlines{Verify: "1s", Reboot: "forever"}}
	causes := u.Validate("spec")
	require.Len(t, causes, 2)
	require.Equal(t, "spec.deadlines.reboot", causes[0].Field)
	require.Equal(t, "spec.deadlines.verify", causes[1].Field)
	require.Equal(t, 30*time.Second, (&UpgradeDeadlines{Verify: "30s"}).Duration("verify", time.Minute))
	require.Equal(t, time.Minute, (&UpgradeDeadlines{}).Duration("verify", time.Minute))
	require.Equal(t, time.Minute, (*UpgradeDeadlines)(nil).Duration("reboot", time.Minute))
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		45 * time.Second: "45s", 250 * time.Second: "4m10s", 4 * time.Minute: "4m", 2 * time.Hour: "2h",
		2*time.Hour + 5*time.Second: "2h0m5s", 90 * time.Minute: "1h30m", -time.Second: "0s",
	} {
		require.Equal(t, want, ShortDuration(d), d.String())
	}
}
