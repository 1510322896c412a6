package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveKind(t *testing.T) {
	tests := []struct {
		names  []string
		kind   string
		plural string
		scoped bool
	}{
		{[]string{"tenants", "tenant", "tn", "Tenant", "TENANTS"}, "Tenant", "tenants", false},
		{[]string{"nodegroups", "nodegroup", "ng", "NodeGroup"}, "NodeGroup", "nodegroups", true},
		{[]string{"machines", "machine", "mc"}, "Machine", "machines", true},
		{[]string{"configpatches", "configpatch", "cp", "ConfigPatch"}, "ConfigPatch", "configpatches", true},
		{[]string{"providers", "provider", "pv"}, "Provider", "providers", false},
		{[]string{"users", "user", "User"}, "User", "users", false},
		{[]string{"apitokens", "apitoken", "token", "APIToken"}, "APIToken", "apitokens", false},
	}
	for _, tt := range tests {
		for _, n := range tt.names {
			t.Run(n, func(t *testing.T) {
				k, err := resolveKind(n)
				require.NoError(t, err)
				assert.Equal(t, tt.kind, k.Kind)
				assert.Equal(t, tt.plural, k.Plural)
				assert.Equal(t, tt.scoped, k.TenantScoped)
			})
		}
	}
	_, err := resolveKind("pods")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown resource kind "pods"`)
	assert.Contains(t, err.Error(), "nodegroups")
}

func TestKindPaths(t *testing.T) {
	tn, _ := resolveKind("tn")
	ng, _ := resolveKind("ng")
	assert.Equal(t, "/api/v1/tenants", tn.collectionPath("ignored"))
	assert.Equal(t, "/api/v1/tenants/acme", tn.itemPath("", "acme"))
	assert.Equal(t, "/api/v1/tenants/acme/nodegroups", ng.collectionPath("acme"))
	assert.Equal(t, "/api/v1/nodegroups", ng.collectionPath(""), "all tenants")
	assert.Equal(t, "/api/v1/tenants/acme/nodegroups/workers", ng.itemPath("acme", "workers"))
}

// Every kind the server registers must be reachable by name.
func TestAllDomainKindsResolve(t *testing.T) {
	for _, k := range allKinds() {
		got, err := resolveKind(k.Plural)
		require.NoError(t, err)
		assert.Equal(t, k.Kind, got.Kind)
	}
}
