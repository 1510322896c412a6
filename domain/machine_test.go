package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// A change of a machine's config hash alone is a MachineConfigApplied event,
// so its event history is its config history; any other change is not.
func TestMachineConfigAppliedEvent(t *testing.T) {
	ref := domain.ObjectRef(domain.MachineKind, "acme", "cp-0")
	state := &domain.Object{APIVersion: domain.APIVersion, Kind: "Machine",
		Metadata: domain.ObjectMeta{Name: "cp-0", Tenant: "acme", UID: "u", Generation: 1, ResourceVersion: "7",
			Labels: map[string]string{"rezuscloud.io/nodegroup": "cp"}, Annotations: map[string]string{domain.AnnotationConfigHash: "aa", "note": "x"}},
		Spec: json.RawMessage(`{"nodeGroup":"cp","role":"controlplane"}`)}
	tests := []struct {
		name string
		edit func(o *domain.Object)
		want string // "" means no event
	}{
		{"hash changed", func(o *domain.Object) { o.Metadata.Annotations[domain.AnnotationConfigHash] = "bb" }, domain.EventMachineConfigApplied},
		{"hash removed", func(o *domain.Object) { delete(o.Metadata.Annotations, domain.AnnotationConfigHash) }, "MachineUpdated"},
		{"hash and another annotation", func(o *domain.Object) {
			o.Metadata.Annotations[domain.AnnotationConfigHash] = "bb"
			o.Metadata.Annotations["note"] = "y"
		}, "MachineUpdated"},
		{"hash and a label", func(o *domain.Object) {
			o.Metadata.Annotations[domain.AnnotationConfigHash] = "bb"
			o.Metadata.Labels["x"] = "y"
		}, "MachineUpdated"},
		{"hash and spec", func(o *domain.Object) {
			o.Metadata.Annotations[domain.AnnotationConfigHash] = "bb"
			o.Spec = json.RawMessage(`{"nodeGroup":"cp","role":"controlplane","address":"10.0.0.1"}`)
		}, "MachineUpdated"},
		{"same hash", func(o *domain.Object) {}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next := state.DeepCopy()
			tc.edit(next)
			evs, err := domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next, Actor: "system:config", Now: time.Unix(0, 0)})
			require.NoError(t, err)
			if tc.want == "" {
				require.Empty(t, evs)
				return
			}
			require.Len(t, evs, 1)
			require.Equal(t, tc.want, evs[0].Type)
		})
	}
}

func TestSetCondition(t *testing.T) {
	t0, t1 := time.Unix(100, 0).UTC(), time.Unix(200, 0).UTC()
	conds := domain.SetCondition(nil, domain.Condition{Type: "A", Status: "True"}, t0)
	conds = domain.SetCondition(conds, domain.Condition{Type: "A", Status: "True", Message: "again"}, t1)
	require.Equal(t, t0, conds[0].LastTransitionTime, "same status keeps its transition time")
	require.Equal(t, "again", conds[0].Message)
	conds = domain.SetCondition(conds, domain.Condition{Type: "A", Status: "False"}, t1)
	require.Equal(t, t1, conds[0].LastTransitionTime)
	conds = domain.SetCondition(conds, domain.Condition{Type: "B", Status: "True"}, t1)
	require.Len(t, conds, 2)
	require.Equal(t, "B", domain.FindCondition(conds, "B").Type)
	require.Nil(t, domain.FindCondition(conds, "C"))
}
