package upgrade

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDecideDriftReimage(t *testing.T) {
	const build = "v1.13.0 abc"
	at := func(min int) *time.Time {
		ts := time.Date(2026, 12, 5, 1, min, 0, 0, time.UTC)
		return &ts
	}
	run := func(name string, created int, phase string, drift string) domain.Upgrade {
		u := domain.Upgrade{Metadata: domain.ObjectMeta{Name: name, CreationTimestamp: at(created)}, Status: domain.UpgradeStatus{Phase: phase, Reason: "why"}}
		if drift != "" {
			u.Metadata.Labels = map[string]string{LabelTrigger: TriggerDrift}
			u.Metadata.Annotations = map[string]string{AnnotationCorrects: drift}
		}
		return u
	}
	for _, tc := range []struct {
		name     string
		runs     []domain.Upgrade
		want     string
		whyHolds string
	}{
		{"no run yet: the first drift run", nil, "reimage-v1-13-0-drift-1", ""},
		{"finished runs of other kinds do not hold it back", []domain.Upgrade{
			run("talos-v1-13-0-5", 1, domain.UpgradeSucceeded, ""), run("talos-v1-12-0-2", 0, domain.UpgradeFailed, "")},
			"reimage-v1-13-0-drift-1", ""},
		{"a run not finished holds it back: it may be the one re-imaging", []domain.Upgrade{
			run("talos-v1-13-0-5", 1, domain.UpgradeSucceeded, ""), run("reimage-v1-13-0-9", 2, domain.UpgradeRunning, "")},
			"", "upgrade reimage-v1-13-0-9 is not finished"},
		{"a pending run holds it back too", []domain.Upgrade{run("mine", 2, domain.UpgradePending, "")},
			"", "upgrade mine is not finished"},
		{"a correction that succeeded: the next one counts up", []domain.Upgrade{
			run("reimage-v1-13-0-drift-1", 1, domain.UpgradeSucceeded, "workers "+build)},
			"reimage-v1-13-0-drift-2", ""},
		{"the latest correction of the same drift failed: not retried", []domain.Upgrade{
			run("reimage-v1-13-0-drift-1", 1, domain.UpgradeSucceeded, "workers "+build),
			run("reimage-v1-13-0-drift-2", 2, domain.UpgradeFailed, "workers "+build)},
			"", "the last correction, reimage-v1-13-0-drift-2, ended Failed (why)"},
		{"nor after a user canceled it", []domain.Upgrade{run("reimage-v1-13-0-drift-1", 1, domain.UpgradeCanceled, "workers "+build)},
			"", "ended Canceled"},
		{"another run since the failed correction: corrected again", []domain.Upgrade{
			run("reimage-v1-13-0-drift-1", 1, domain.UpgradeFailed, "workers "+build),
			run("by-hand", 3, domain.UpgradeSucceeded, "")},
			"reimage-v1-13-0-drift-2", ""},
		{"a failed correction of another declaration does not hold it back", []domain.Upgrade{
			run("reimage-v1-13-0-drift-1", 1, domain.UpgradeFailed, "workers v1.13.0 old")},
			"reimage-v1-13-0-drift-2", ""},
		{"nor one of another group", []domain.Upgrade{
			run("reimage-v1-13-0-drift-1", 1, domain.UpgradeFailed, "storage "+build)},
			"reimage-v1-13-0-drift-2", ""},
		{"a name taken is skipped", []domain.Upgrade{
			run("reimage-v1-13-0-drift-2", 1, domain.UpgradeSucceeded, "workers "+build)},
			"reimage-v1-13-0-drift-1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideDriftReimage(tc.runs, "workers", "v1.13.0", build)
			require.Equal(t, tc.want, d.Name)
			if tc.whyHolds == "" {
				require.Empty(t, d.Why)
			} else {
				require.Contains(t, d.Why, tc.whyHolds)
			}
		})
	}
}
