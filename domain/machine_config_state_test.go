package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestMachineConfigState(t *testing.T) {
	applied := func(status, reason string) []domain.Condition {
		return []domain.Condition{{Type: "Ready", Status: "False"}, {Type: domain.ConditionConfigApplied, Status: status, Reason: reason}}
	}
	tests := []struct {
		name       string
		st         domain.MachineStatus
		want       string
		wantReason string
	}{
		{"a new machine", domain.MachineStatus{}, domain.ConfigStatePending, ""},
		{"applied", domain.MachineStatus{ConfigUpToDate: true, Conditions: applied("True", "AppliedInPlace")}, domain.ConfigStateUpToDate, "AppliedInPlace"},
		{"up to date without a condition", domain.MachineStatus{ConfigUpToDate: true}, domain.ConfigStateUpToDate, ""},
		{"the node refused", domain.MachineStatus{Conditions: applied("False", "ApplyFailed")}, domain.ConfigStateFailed, "ApplyFailed"},
		{"a new config not yet applied", domain.MachineStatus{Conditions: applied("True", "Day0")}, domain.ConfigStatePending, "Day0"},
		{"an unknown outcome", domain.MachineStatus{Conditions: applied("Unknown", "")}, domain.ConfigStatePending, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, c := tc.st.ConfigState()
			require.Equal(t, tc.want, got)
			reason := ""
			if c != nil {
				reason = c.Reason
			}
			require.Equal(t, tc.wantReason, reason)
		})
	}
}
