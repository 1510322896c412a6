package domain_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestConfigHistory reads event sequences as the config path writes them: the
// hash alone (MachineConfigApplied, still showing the status from before),
// then the status, which is not written again when it would not change.
func TestConfigHistory(t *testing.T) {
	type ev struct {
		typ      string
		hash     string
		upToDate bool
		cond     string // "Status/Reason/Message" or ""
	}
	applied := domain.EventMachineConfigApplied
	tests := []struct {
		name   string
		events []ev
		want   []string // "hash reason message" per change, "awaiting" appended when so
	}{
		{"nothing yet", []ev{{"MachineCreated", "", false, ""}}, nil},
		{"day 0 recorded after the creation", []ev{{"MachineCreated", "a", false, ""}, {"MachineStatusUpdated", "a", true, "True/Day0/user data"}},
			[]string{"a Day0 user data"}},
		{"created with its status", []ev{{"MachineCreated", "a", true, "True/Day0/maintenance apply"}}, []string{"a Day0 maintenance apply"}},
		{"the hash's own post-image is the status before", []ev{
			{"MachineCreated", "a", true, "True/Day0/"},
			{applied, "b", true, "True/Day0/"},
			{"MachineStatusUpdated", "b", true, "True/AppliedInPlace/no reboot"},
		}, []string{"a Day0 ", "b AppliedInPlace no reboot"}},
		{"status unchanged: the same outcome", []ev{
			{"MachineCreated", "a", true, "True/AppliedInPlace/"},
			{applied, "b", true, "True/AppliedInPlace/"},
			{applied, "c", true, "True/AppliedInPlace/"},
		}, []string{"a AppliedInPlace ", "b AppliedInPlace ", "c AppliedInPlace "}},
		{"up to date again with the same condition", []ev{
			{"MachineCreated", "a", true, "True/AppliedInPlace/"},
			{"MachineStatusUpdated", "a", false, "True/AppliedInPlace/"},
			{applied, "b", false, "True/AppliedInPlace/"},
			{"MachineStatusUpdated", "b", true, "True/AppliedInPlace/"},
		}, []string{"a AppliedInPlace ", "b AppliedInPlace "}},
		{"a failure, repeated, then the fault lifted", []ev{
			{"MachineCreated", "a", true, "True/Day0/"},
			{"MachineStatusUpdated", "a", false, "False/ApplyFailed/unavailable"},
			{"MachineStatusUpdated", "a", false, "False/ApplyFailed/unavailable"},
			{"MachineStatusUpdated", "a", false, "False/RenderFailed/patch x"},
			{applied, "b", false, "False/RenderFailed/patch x"},
			{"MachineStatusUpdated", "b", true, "True/AppliedWithReboot/install changed"},
		}, []string{"a Day0 ", " ApplyFailed unavailable", " RenderFailed patch x", "b AppliedWithReboot install changed"}},
		{"waiting for its turn is no entry", []ev{
			{"MachineCreated", "a", true, "True/Day0/"},
			{"MachineStatusUpdated", "a", false, "Unknown/Pending/waiting for its turn"},
			{applied, "b", false, "Unknown/Pending/waiting for its turn"},
			{"MachineStatusUpdated", "b", true, "True/AppliedInPlace/"},
		}, []string{"a Day0 ", "b AppliedInPlace "}},
		{"the outcome not recorded yet", []ev{
			{"MachineCreated", "a", false, "True/Day0/"},
			{applied, "b", false, "True/Day0/"},
		}, []string{"a Day0 ", "b   awaiting"}},
		{"a hash over one never confirmed", []ev{
			{applied, "a", false, ""},
			{applied, "b", false, ""},
			{"MachineStatusUpdated", "b", true, "True/AppliedInPlace/"},
		}, []string{"a  ", "b AppliedInPlace "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := domain.NewConfigHistory()
			for i, e := range tc.events {
				st := domain.MachineStatus{Stage: "Running", ConfigUpToDate: e.upToDate}
				if e.cond != "" {
					p := strings.SplitN(e.cond, "/", 3)
					st.Conditions = []domain.Condition{{Type: domain.ConditionConfigApplied, Status: p[0], Reason: p[1], Message: p[2]}}
				}
				raw, err := json.Marshal(st)
				require.NoError(t, err)
				m := &domain.Object{Kind: "Machine", Metadata: domain.ObjectMeta{Name: "m"}, Status: raw}
				if e.hash != "" {
					m.Metadata.Annotations = map[string]string{domain.AnnotationConfigHash: e.hash}
				}
				h.Add(e.typ, "system:config", time.Unix(int64(i), 0), m)
			}
			var got []string
			for _, c := range h.Changes() {
				s := fmt.Sprintf("%s %s %s", c.Hash, c.Reason, c.Message)
				if c.Awaiting {
					s += " awaiting"
				}
				got = append(got, s)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
