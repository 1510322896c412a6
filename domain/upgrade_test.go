package domain_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestUpgradeSpec(t *testing.T) {
	runSpecCases(t, "Upgrade", []specCase{
		{name: "target only", spec: `{"talosVersion":"v1.13.1"}`, want: `{"talosVersion":"v1.13.1","maxParallelism":1}`},
		{name: "version gets a leading v", spec: `{"talosVersion":"1.13.1"}`, want: `{"talosVersion":"v1.13.1","maxParallelism":1}`},
		{name: "pre-release target", spec: `{"talosVersion":"v1.14.0-beta.0"}`},
		{
			name: "node groups are sorted",
			spec: `{"talosVersion":"v1.13.1","nodeGroups":["workers","cp"],"maxParallelism":3}`,
			want: `{"talosVersion":"v1.13.1","nodeGroups":["cp","workers"],"maxParallelism":3}`,
		},
		{name: "empty node groups mean all", spec: `{"talosVersion":"v1.13.1","nodeGroups":[]}`, want: `{"talosVersion":"v1.13.1","maxParallelism":1}`},
		{name: "cancel requested", spec: `{"talosVersion":"v1.13.1","cancelRequested":true}`},
		{name: "target missing", spec: `{}`, fields: []string{"spec.talosVersion"}},
		{name: "target not a version", spec: `{"talosVersion":"latest"}`, fields: []string{"spec.talosVersion"}},
		{name: "target with two parts", spec: `{"talosVersion":"v1.13"}`, fields: []string{"spec.talosVersion"}},
		{name: "node group twice", spec: `{"talosVersion":"v1.13.1","nodeGroups":["w","cp","w"]}`, fields: []string{"spec.nodeGroups[2]"}},
		{name: "bad node group", spec: `{"talosVersion":"v1.13.1","nodeGroups":["Workers"]}`, fields: []string{"spec.nodeGroups[0]"}},
		{name: "maxParallelism negative", spec: `{"talosVersion":"v1.13.1","maxParallelism":-1}`, fields: []string{"spec.maxParallelism"}},
		{name: "maxParallelism too large", spec: `{"talosVersion":"v1.13.1","maxParallelism":1001}`, fields: []string{"spec.maxParallelism"}},
		{name: "unknown field", spec: `{"talosVersion":"v1.13.1","force":true}`, fields: []string{"spec.force"}},
		{name: "kubernetes target", spec: `{"kubernetesVersion":"1.36.1"}`, want: `{"kubernetesVersion":"v1.36.1","maxParallelism":1}`},
		{name: "both targets", spec: `{"talosVersion":"v1.13.1","kubernetesVersion":"v1.36.1"}`, fields: []string{"spec.kubernetesVersion"}},
		{name: "kubernetes target not a version", spec: `{"kubernetesVersion":"1.36"}`, fields: []string{"spec.kubernetesVersion"}},
	})
}

func TestUpgradeStatus(t *testing.T) {
	kind := domain.MustKind("Upgrade")
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	good := domain.UpgradeStatus{Phase: domain.UpgradeRunning, Current: "cp-2", StartTime: &now, Machines: []domain.UpgradeMachine{
		{Name: "cp-1", NodeGroup: "cp", Role: domain.RoleControlPlane, From: "v1.12.0", To: "v1.13.0", Phase: domain.StepDone, Started: &now, Finished: &now},
		{Name: "cp-2", NodeGroup: "cp", Role: domain.RoleControlPlane, From: "v1.12.0", To: "v1.13.0", Phase: domain.StepRebooting, Started: &now},
	}}
	tests := []struct {
		name   string
		mutate func(*domain.UpgradeStatus)
		fields []string
	}{
		{name: "valid", mutate: func(*domain.UpgradeStatus) {}},
		{name: "unknown phase", mutate: func(s *domain.UpgradeStatus) { s.Phase = "Paused" }, fields: []string{"status.phase"}},
		{name: "unknown step phase", mutate: func(s *domain.UpgradeStatus) { s.Machines[1].Phase = "Sleeping" }, fields: []string{"status.machines[1].phase"}},
		{name: "machine twice", mutate: func(s *domain.UpgradeStatus) { s.Machines[1].Name = "cp-1" }, fields: []string{"status.machines[1].name"}},
		{name: "bad role", mutate: func(s *domain.UpgradeStatus) { s.Machines[0].Role = "master" }, fields: []string{"status.machines[0].role"}},
		{name: "bad versions", mutate: func(s *domain.UpgradeStatus) { s.Machines[0].From, s.Machines[0].To = "x", "" }, fields: []string{"status.machines[0].from", "status.machines[0].to"}},
		{name: "error too long", mutate: func(s *domain.UpgradeStatus) {
			s.Machines[0].Error = strings.Repeat("x", domain.MaxUpgradeErrorBytes+1)
		}, fields: []string{"status.machines[0].error"}},
		{name: "reason too long", mutate: func(s *domain.UpgradeStatus) { s.Reason = strings.Repeat("x", domain.MaxUpgradeReasonBytes+1) }, fields: []string{"status.reason"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := good
			st.Machines = append([]domain.UpgradeMachine(nil), good.Machines...)
			tc.mutate(&st)
			raw, err := json.Marshal(st)
			require.NoError(t, err)
			out, causes := kind.NormalizeStatus(raw)
			require.Equal(t, sorted(tc.fields), causeFields(causes), "causes: %+v", causes)
			if tc.fields == nil {
				again, causes := kind.NormalizeStatus(out)
				require.Empty(t, causes)
				require.Equal(t, string(out), string(again))
			}
		})
	}
}

func TestUpgradePathProblem(t *testing.T) {
	tests := []struct {
		from, to string
		// want is a fragment of the problem; "" means the path is allowed.
		want string
	}{
		{"v1.12.0", "v1.13.0", ""},
		{"v1.12.3", "v1.12.5", ""},
		{"v1.12.5", "v1.12.3", ""}, // a patch downgrade is allowed
		{"v1.13.0", "v1.13.0", ""},
		{"1.12.0", "v1.13.2", ""},
		{"v1.12.0", "v1.14.0-beta.0", "skips a minor version; upgrade to v1.13.x first"},
		{"v1.12.0", "v1.14.0", "skips a minor version"},
		{"v1.11.9", "v1.13.0", "upgrade to v1.12.x first"},
		{"v1.13.0", "v1.12.9", "downgrade across a minor version"},
		{"v1.13.0", "v1.11.0", "downgrade across a minor version"},
		{"v1.13.0", "v2.0.0", "major version"},
		{"v1.13", "v1.13.1", "not a semantic version"},
		{"v1.13.0", "latest", "not a semantic version"},
	}
	for _, tc := range tests {
		t.Run(tc.from+"->"+tc.to, func(t *testing.T) {
			got := domain.UpgradePathProblem(tc.from, tc.to)
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.want)
		})
	}
}

func TestUpgradeCancelEvent(t *testing.T) {
	state := &domain.Object{APIVersion: domain.APIVersion, Kind: "Upgrade",
		Metadata: domain.ObjectMeta{Name: "to-v1-13", Tenant: "acme", UID: "u1", Generation: 1, ResourceVersion: "7"},
		Spec:     json.RawMessage(`{"talosVersion":"v1.13.0","maxParallelism":1}`), Status: json.RawMessage(`{"phase":"Running"}`)}
	update := func(spec string, labels map[string]string) string {
		in := state.DeepCopy()
		in.Spec, in.Metadata.Labels = json.RawMessage(spec), labels
		evs, err := domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: state.Ref(), Object: in, Now: time.Now()})
		require.NoError(t, err)
		require.Len(t, evs, 1)
		return evs[0].Type
	}
	require.Equal(t, "UpgradeCancelRequested", update(`{"talosVersion":"v1.13.0","cancelRequested":true}`, nil))
	require.Equal(t, "UpgradeUpdated", update(`{"talosVersion":"v1.13.1","cancelRequested":true}`, nil))
	require.Equal(t, "UpgradeUpdated", update(`{"talosVersion":"v1.13.0","cancelRequested":true}`, map[string]string{"a": "b"}))
}
