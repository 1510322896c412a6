package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestDriftCheckValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check DriftCheck
		field string
	}{
		{"empty is the server's default", DriftCheck{}, ""},
		{"an interval and correct", DriftCheck{Interval: "30m", Action: DriftCorrect}, ""},
		{"not a duration", DriftCheck{Interval: "hourly"}, "spec.driftCheck.interval"},
		{"too often", DriftCheck{Interval: "1s"}, "spec.driftCheck.interval"},
		{"too seldom", DriftCheck{Interval: "800h"}, "spec.driftCheck.interval"},
		{"an unknown action", DriftCheck{Action: "fix"}, "spec.driftCheck.action"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			causes := tc.check.Validate(field.NewPath("spec", "driftCheck"))
			if tc.field == "" {
				require.Empty(t, causes)
				return
			}
			require.Len(t, causes, 1)
			require.Equal(t, tc.field, causes[0].Field)
		})
	}
}

func TestDriftScheduleOf(t *testing.T) {
	for _, tc := range []struct {
		name              string
		spec              *DriftCheck
		defaults, minimum time.Duration
		want              DriftSchedule
	}{
		{"no spec: the server's default, report", nil, time.Hour, time.Minute, DriftSchedule{time.Hour, DriftReport}},
		{"no spec and no default: off", nil, 0, time.Minute, DriftSchedule{0, DriftReport}},
		{"the spec's interval and action", &DriftCheck{Interval: "4h", Action: DriftCorrect}, time.Hour, time.Minute, DriftSchedule{4 * time.Hour, DriftCorrect}},
		{"a spec without interval keeps the default", &DriftCheck{Action: DriftCorrect}, time.Hour, time.Minute, DriftSchedule{time.Hour, DriftCorrect}},
		{"an explicit interval runs when the default is off", &DriftCheck{Interval: "2h"}, 0, time.Minute, DriftSchedule{2 * time.Hour, DriftReport}},
		{"below the server's minimum: raised to it", &DriftCheck{Interval: "10s"}, time.Hour, 5 * time.Minute, DriftSchedule{5 * time.Minute, DriftReport}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, DriftScheduleOf(tc.spec, tc.defaults, tc.minimum))
		})
	}
}

func TestDriftDue(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(-d); return &x }
	hourly := DriftSchedule{Every: time.Hour, Action: DriftReport}
	for _, tc := range []struct {
		name    string
		sched   DriftSchedule
		applied bool
		last    *time.Time
		want    bool
	}{
		{"never checked", hourly, true, nil, true},
		{"checked an hour ago", hourly, true, at(time.Hour), true},
		{"checked a minute ago", hourly, true, at(time.Minute), false},
		{"the current spec is not applied (pending or failed)", hourly, false, at(2 * time.Hour), false},
		{"checks off", DriftSchedule{}, true, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, DriftDue(tc.sched, tc.applied, tc.last, now))
		})
	}
}

func TestDriftConditionAndSummary(t *testing.T) {
	for _, tc := range []struct {
		name           string
		st             DriftStatus
		status, reason string
		message        string
	}{
		{"nothing", DriftStatus{}, "False", ReasonInSync, "the infrastructure and the machines' configs are as declared"},
		{"a deleted server", DriftStatus{Add: 1}, "True", ReasonInfrastructureDrifted, "1 to add, 0 to change, 0 to destroy"},
		{"a reconfigured node", DriftStatus{Machines: []MachineDrift{{Name: "w-1"}}}, "True", ReasonConfigDrifted, "0 to add, 0 to change, 0 to destroy; w-1 config differs"},
		{"both, corrected", DriftStatus{Add: 2, Destroy: 1, Machines: []MachineDrift{{Name: "w-1"}, {Name: "w-2"}}, Correction: "apply-1"}, "True", ReasonDrifted,
			"2 to add, 0 to change, 1 to destroy; w-1, w-2 configs differ; correcting with apply apply-1"},
		{"a failed check", DriftStatus{Error: "tofu plan: boom"}, "Unknown", ReasonDriftCheckFailed, "tofu plan: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			if st.Error == "" {
				st.Summary = DriftSummary(st.Add, st.Change, st.Destroy, st.Machines)
			}
			c := DriftCondition(&st)
			require.Equal(t, ConditionDrifted, c.Type)
			require.Equal(t, tc.status, c.Status)
			require.Equal(t, tc.reason, c.Reason)
			require.Equal(t, tc.message, c.Message)
			require.Equal(t, tc.status == "True", st.Drifted())
		})
	}
}
