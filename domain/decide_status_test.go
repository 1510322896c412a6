package domain_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDecideStatus(t *testing.T) {
	machineState := func(t *testing.T) *domain.Object {
		return mustCreate(t, refOf("Machine", "t1", "m1"), newObject("Machine", `{"nodeGroup":"workers","role":"worker"}`), 9)
	}
	tests := []struct {
		name       string
		state      func(t *testing.T) *domain.Object
		ref        domain.Ref
		status     string
		labels     map[string]string
		wantReason domain.Reason
		wantFields []string
		// wantStatus is the stored status (JSONEq); empty means no event.
		wantStatus string
	}{
		{
			name:       "valid status is normalised",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"phase":"Ready","observedGeneration":1,"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-05-01T12:00:00Z"}]}`,
			wantStatus: `{"phase":"Ready","observedGeneration":1,"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-05-01T12:00:00Z"}],"machines":{"total":0,"ready":0,"controlPlane":0,"workers":0}}`,
		},
		{
			name:       "labels in a status body are ignored",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"phase":"Provisioning"}`,
			labels:     map[string]string{"hijack": "yes"},
			wantStatus: `{"phase":"Provisioning","machines":{"total":0,"ready":0,"controlPlane":0,"workers":0}}`,
		},
		{
			name:       "bad condition status",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"conditions":[{"type":"Ready","status":"Maybe"}]}`,
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"status.conditions[0].status"},
		},
		{
			name:       "condition without a type, duplicate condition, bad phase",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"phase":"Sleeping","conditions":[{"status":"True"},{"type":"A","status":"True"},{"type":"A","status":"False"}]}`,
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"status.conditions[0].type", "status.conditions[2].type", "status.phase"},
		},
		{
			name:       "unknown status field",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"phase":"Ready","healthy":true}`,
			wantReason: domain.ReasonBadRequest,
			wantFields: []string{"status.healthy"},
		},
		{
			name:       "node group ready replicas above replicas",
			state:      func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:        refOf("NodeGroup", "t1", "workers"),
			status:     `{"replicas":1,"readyReplicas":2}`,
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"status.readyReplicas"},
		},
		{
			name:       "machine talos version",
			state:      machineState,
			ref:        refOf("Machine", "t1", "m1"),
			status:     `{"stage":"Running","ready":true,"talosVersion":"one"}`,
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"status.talosVersion"},
		},
		{
			name:       "machine stage defaults to Unknown",
			state:      machineState,
			ref:        refOf("Machine", "t1", "m1"),
			status:     `{"ready":true,"configUpToDate":true}`,
			wantStatus: `{"stage":"Unknown","ready":true,"configUpToDate":true}`,
		},
		{
			name:   "no-op when equal after normalisation",
			state:  func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:    refOf("NodeGroup", "t1", "workers"),
			status: `{ "readyReplicas": 2, "replicas": 3 }`,
		},
		{
			name:   "writing a created tenant's status back unchanged is a no-op",
			state:  func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status: "<state>",
		},
		{
			name:   "writing a created machine's status back unchanged is a no-op",
			state:  machineState,
			ref:    refOf("Machine", "t1", "m1"),
			status: "<state>",
		},
		{
			name:       "not found",
			state:      func(t *testing.T) *domain.Object { return nil },
			status:     `{"phase":"Ready"}`,
			wantReason: domain.ReasonNotFound,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.state(t)
			ref := tc.ref
			if ref.Kind == "" {
				ref = refOf("Tenant", "", "t1")
			}
			body := &domain.Object{Status: json.RawMessage(tc.status)}
			if tc.status == "<state>" {
				body.Status = append(json.RawMessage(nil), st.Status...)
			}
			body.Metadata.Labels = tc.labels
			before := snapshot(st)
			evs, err := domain.Decide(st, command(domain.OpUpdateStatus, ref, body))
			require.Equal(t, before, st, "Decide must not modify the state")
			if tc.wantReason != "" {
				require.Equal(t, tc.wantReason, domain.ReasonOf(err), "error: %v", err)
				require.Empty(t, evs)
				if tc.wantFields != nil {
					require.Equal(t, sorted(tc.wantFields), errFields(t, err))
				}
				return
			}
			require.NoError(t, err)
			if tc.wantStatus == "" {
				if len(evs) > 0 {
					t.Fatalf("want no events, got %s with status %s (state status %s)", evs[0].Type, evs[0].Object.Status, st.Status)
				}
				return
			}
			require.Len(t, evs, 1)
			requireEvent(t, evs[0], domain.MustKind(ref.Kind).Kind+"StatusUpdated", domain.ActionUpdated)
			o := evs[0].Object
			require.JSONEq(t, tc.wantStatus, string(o.Status))
			require.Equal(t, st.Spec, o.Spec)
			require.Equal(t, st.Metadata.Generation, o.Metadata.Generation, "a status write does not bump generation")
			require.Equal(t, st.Metadata.Labels, o.Metadata.Labels)
		})
	}
}
