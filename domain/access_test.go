package domain

import (
	"testing"

	"github.com/stretchr/testify/require"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestAccessTenantRole(t *testing.T) {
	prodA := map[string]string{"env": "prod", "team": "a"}
	devB := map[string]string{"env": "dev", "team": "b"}
	acme := []RoleBinding{{Role: RoleAdmin, Tenants: []string{"acme"}}}
	prod := []RoleBinding{{Role: RoleView, TenantSelector: "env=prod,team in (a,b)"}}
	cases := []struct {
		name     string
		access   Access
		tenant   string
		labels   map[string]string
		want     string
		global   string
		highest  string
		isScoped bool
	}{
		{"global view sees all", GlobalAccess(RoleView), "x", devB, RoleView, RoleView, RoleView, false},
		{"none sees nothing", GlobalAccess(RoleNone), "x", devB, RoleNone, RoleNone, RoleNone, false},
		{"empty role is none", GlobalAccess(""), "x", nil, RoleNone, RoleNone, RoleNone, false},
		{"named binding", NewAccess(RoleNone, acme), "acme", nil, RoleAdmin, RoleNone, RoleAdmin, true},
		{"named binding, other tenant", NewAccess(RoleNone, acme), "beta", nil, RoleNone, RoleNone, RoleAdmin, true},
		{"selector matches", NewAccess(RoleNone, prod), "p", prodA, RoleView, RoleNone, RoleView, true},
		{"selector does not match", NewAccess(RoleNone, prod), "d", devB, RoleNone, RoleNone, RoleView, true},
		{"binding above global", NewAccess(RoleView, acme), "acme", nil, RoleAdmin, RoleView, RoleAdmin, true},
		{"global above binding", NewAccess(RoleEdit, prod), "p", prodA, RoleEdit, RoleEdit, RoleEdit, true},
		{"token narrowed to acme view", GlobalAccess(RoleAdmin).Narrowed([]RoleBinding{{Role: RoleView, Tenants: []string{"acme"}}}), "acme", nil, RoleView, RoleNone, RoleView, true},
		{"token narrowed, other tenant", GlobalAccess(RoleAdmin).Narrowed([]RoleBinding{{Role: RoleView, Tenants: []string{"acme"}}}), "beta", nil, RoleNone, RoleNone, RoleView, true},
		{"token capped by owner at use", NewAccess(RoleNone, prod).Narrowed([]RoleBinding{{Role: RoleAdmin, Tenants: []string{"d"}}}), "d", devB, RoleNone, RoleNone, RoleView, true},
		{"token capped by owner's role", NewAccess(RoleNone, prod).Narrowed([]RoleBinding{{Role: RoleAdmin, Tenants: []string{"p"}}}), "p", prodA, RoleView, RoleNone, RoleView, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, c.access.TenantRole(c.tenant, c.labels))
			require.Equal(t, c.global, c.access.Global())
			require.Equal(t, c.highest, c.access.Highest())
			require.Equal(t, c.isScoped, c.access.Scoped())
		})
	}
}

func TestBindingsValidation(t *testing.T) {
	cases := []struct {
		name   string
		b      []RoleBinding
		fields []string
	}{
		{"ok by name", []RoleBinding{{Role: RoleEdit, Tenants: []string{"acme"}}}, nil},
		{"ok by selector", []RoleBinding{{Role: RoleView, TenantSelector: "env=prod,team in (a,b)"}}, nil},
		{"bad role", []RoleBinding{{Role: "root", Tenants: []string{"acme"}}}, []string{"spec.bindings[0].role"}},
		{"neither", []RoleBinding{{Role: RoleView}}, []string{"spec.bindings[0]"}},
		{"both", []RoleBinding{{Role: RoleView, Tenants: []string{"a"}, TenantSelector: "x=y"}}, []string{"spec.bindings[0]"}},
		{"bad name", []RoleBinding{{Role: RoleView, Tenants: []string{"Not_A_Name"}}}, []string{"spec.bindings[0].tenants[0]"}},
		{"bad selector", []RoleBinding{{Role: RoleView, TenantSelector: "env in (a"}}, []string{"spec.bindings[0].tenantSelector"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := UserSpec{Role: RoleNone, Bindings: c.b}
			var got []string
			for _, cause := range s.Validate("spec") {
				got = append(got, cause.Field)
			}
			require.Equal(t, c.fields, got)
		})
	}
	many := make([]RoleBinding, MaxBindings+1)
	require.Len(t, validateBindings(many, field.NewPath("spec", "bindings")), 1)
}

func TestNarrowerThan(t *testing.T) {
	owner := NewAccess(RoleView, []RoleBinding{{Role: RoleEdit, Tenants: []string{"acme"}}})
	require.Empty(t, owner.NarrowerThan([]RoleBinding{{Role: RoleEdit, Tenants: []string{"acme"}}}, field.NewPath("spec", "bindings")))
	causes := owner.NarrowerThan([]RoleBinding{{Role: RoleAdmin, Tenants: []string{"acme"}}}, field.NewPath("spec", "bindings"))
	require.Len(t, causes, 1)
	require.Equal(t, "spec.bindings[0].role", causes[0].Field)
}
