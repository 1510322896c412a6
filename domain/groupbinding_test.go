package domain

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGroupBindingSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   string
		fields []string
	}{
		{"global role", `{"groups":["platform"],"role":"view"}`, nil},
		{"tenant bindings", `{"groups":["platform"],"bindings":[{"role":"edit","tenantSelector":"team=platform"}]}`, nil},
		{"no groups", `{"role":"view"}`, []string{"spec.groups"}},
		{"grants nothing", `{"groups":["platform"]}`, []string{"spec.bindings"}},
		{"empty group", `{"groups":[""],"role":"view"}`, []string{"spec.groups[0]"}},
		{"control character", `{"groups":["a\nb"],"role":"view"}`, []string{"spec.groups[0]"}},
		{"long group", `{"groups":["` + strings.Repeat("g", MaxGroupNameLength+1) + `"],"role":"view"}`, []string{"spec.groups[0]"}},
		{"bad role and binding", `{"groups":["p"],"role":"root","bindings":[{"role":"edit"}]}`, []string{"spec.role", "spec.bindings[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, causes := GroupBindingKind.NormalizeSpec(json.RawMessage(tc.spec))
			var got []string
			for _, c := range causes {
				got = append(got, c.Field)
			}
			require.ElementsMatch(t, tc.fields, got, "causes: %v", causes)
		})
	}
}

func TestGroupGrant(t *testing.T) {
	bindings := []GroupBindingSpec{
		{Groups: []string{"platform"}, Role: RoleNone, Bindings: []RoleBinding{{Role: RoleEdit, TenantSelector: "team=platform"}}},
		{Groups: []string{"auditors", "sre"}, Role: RoleView},
		{Groups: []string{"admins"}, Role: RoleAdmin},
	}
	for _, tc := range []struct {
		name     string
		groups   []string
		role     string
		bindings int
	}{
		{"no groups", nil, RoleNone, 0},
		{"unbound group", []string{"sales"}, RoleNone, 0},
		{"tenant binding only", []string{"platform"}, RoleNone, 1},
		{"any listed group", []string{"sre"}, RoleView, 0},
		{"highest role wins, bindings add", []string{"platform", "admins", "sre"}, RoleAdmin, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			role, bs := GroupGrant(bindings, tc.groups)
			require.Equal(t, tc.role, role)
			require.Len(t, bs, tc.bindings)
		})
	}
}
