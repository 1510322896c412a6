package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// kind is what the CLI knows about a resource kind: its names on the command
// line and in URLs, and whether it lives under a tenant.
type kind struct {
	// Kind is the CamelCase name objects carry, e.g. "NodeGroup".
	Kind string
	// Plural is the URL segment, e.g. "nodegroups".
	Plural string
	// Singular is the lower-case singular, e.g. "nodegroup"; used in messages and -o name.
	Singular string
	// Short are the abbreviations accepted on the command line, e.g. "ng".
	Short []string
	// TenantScoped kinds live under /api/v1/tenants/{tenant}/.
	TenantScoped bool
}

// builtinKinds lists the kinds with kubectl-style short names. Users and API
// tokens are listed here rather than taken from domain alone, because the CLI
// must know their names even against a server (or a domain package) that does
// not have them yet; domain.Kinds() adds any kind this table lacks.
var builtinKinds = []kind{
	{Kind: "Tenant", Plural: "tenants", Singular: "tenant", Short: []string{"tn"}},
	{Kind: "NodeGroup", Plural: "nodegroups", Singular: "nodegroup", Short: []string{"ng"}, TenantScoped: true},
	{Kind: "Machine", Plural: "machines", Singular: "machine", Short: []string{"mc"}, TenantScoped: true},
	{Kind: "ConfigPatch", Plural: "configpatches", Singular: "configpatch", Short: []string{"cp"}, TenantScoped: true},
	{Kind: "Provider", Plural: "providers", Singular: "provider", Short: []string{"pv"}},
	{Kind: "User", Plural: "users", Singular: "user"},
	{Kind: "APIToken", Plural: "apitokens", Singular: "apitoken", Short: []string{"token"}},
	{Kind: "GroupBinding", Plural: "groupbindings", Singular: "groupbinding", Short: []string{"gb"}},
	{Kind: "EtcdBackup", Plural: "etcdbackups", Singular: "etcdbackup", Short: []string{"eb", "backups"}, TenantScoped: true},
	{Kind: "Restore", Plural: "restores", Singular: "restore", TenantScoped: true},
	{Kind: "Remediation", Plural: "remediations", Singular: "remediation", Short: []string{"rem"}, TenantScoped: true},
	{Kind: "Rollout", Plural: "rollouts", Singular: "rollout", Short: []string{"ro"}},
}

// allKinds is builtinKinds plus whatever else domain registers (upgrades,
// applies, ... as they are added), taking scope from domain where it knows the kind.
func allKinds() []kind {
	out := append([]kind(nil), builtinKinds...)
	known := map[string]bool{}
	for _, k := range out {
		known[strings.ToLower(k.Kind)] = true
	}
	for _, dk := range domain.Kinds() {
		if known[strings.ToLower(dk.Kind)] {
			continue
		}
		out = append(out, kind{Kind: dk.Kind, Plural: dk.Plural, Singular: strings.ToLower(dk.Kind), TenantScoped: dk.TenantScoped})
	}
	return out
}

// resolveKind finds a kind by any of its names, case-insensitively: the Kind
// ("NodeGroup"), plural ("nodegroups"), singular ("nodegroup") or a short name ("ng").
func resolveKind(name string) (kind, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, k := range allKinds() {
		if n == strings.ToLower(k.Kind) || n == k.Plural || n == k.Singular {
			return k, nil
		}
		for _, s := range k.Short {
			if n == s {
				return k, nil
			}
		}
	}
	return kind{}, fmt.Errorf("unknown resource kind %q; known kinds: %s", name, strings.Join(kindNames(), ", "))
}

// kindNames lists the plural names, for messages and shell completion.
func kindNames() []string {
	var names []string
	for _, k := range allKinds() {
		names = append(names, k.Plural)
	}
	sort.Strings(names)
	return names
}

// collectionPath is the URL path of the kind's collection. An empty tenant
// with a tenant-scoped kind means across all tenants (/api/v1/<plural>).
func (k kind) collectionPath(tenant string) string {
	if k.TenantScoped && tenant != "" {
		return "/api/v1/tenants/" + tenant + "/" + k.Plural
	}
	return "/api/v1/" + k.Plural
}

// itemPath is the URL path of one object.
func (k kind) itemPath(tenant, name string) string {
	return k.collectionPath(tenant) + "/" + name
}

// ref is how messages name an object: nodegroup "workers" (tenant "acme").
func (k kind) ref(tenant, name string) string {
	if k.TenantScoped && tenant != "" {
		return fmt.Sprintf("%s %q in tenant %q", k.Singular, name, tenant)
	}
	return fmt.Sprintf("%s %q", k.Singular, name)
}

// errTenantRequired says a tenant-scoped kind needs a tenant.
func (k kind) errTenantRequired(allowAll bool) error {
	if allowAll {
		return fmt.Errorf("%s are tenant-scoped: give --tenant/-t (or set a tenant on the context), or -A for all tenants", k.Plural)
	}
	return fmt.Errorf("%s are tenant-scoped: give --tenant/-t (or set a tenant on the context)", k.Plural)
}
