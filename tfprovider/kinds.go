package tfprovider

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// canonVersion is a version as the server stores it: with a leading v.
func canonVersion(s string) string {
	if s != "" && !strings.HasPrefix(s, "v") {
		return "v" + s
	}
	return s
}

// canonTime is an RFC 3339 time as an instant in UTC ("2027-01-01T01:00:00+01:00"
// and "2027-01-01T00:00:00Z" are equal).
func canonTime(s string) string {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC().Format(time.RFC3339Nano)
	}
	return s
}

func spec(p ...string) []string { return append([]string{"spec"}, p...) }

// The resources: every kind the API lets a user write. Sub-objects with
// shapes of their own are JSON strings (jsonencode); the API reference
// (docs/api.md) describes them.
var (
	tenantKind = &kindSpec{typeName: "tenant", plural: "tenants",
		readyWords: "the current spec applied and the tenant's phase Ready", ready: tenantReady,
		desc: "A tenant: one Talos Kubernetes cluster. Its node groups, config patches and the rest are resources of their own.",
		fields: []field{
			{attr: "talos_version", path: spec("talosVersion"), defaulted: true, canon: canonVersion,
				desc: "The Talos version of the cluster's machines (default: the server's). A rollout or upgrade moves it on the server: declare the new version here too, or the next apply moves it back."},
			{attr: "kubernetes_version", path: spec("kubernetesVersion"), defaulted: true, canon: canonVersion,
				desc: "The Kubernetes version (default: the server's)."},
			{attr: "control_plane_endpoint", path: spec("controlPlane", "endpoint"), defaulted: true,
				desc: "The Kubernetes API endpoint (https://host:6443); default: the first control plane's address."},
			{attr: "pod_subnets", path: spec("network", "podSubnets"), kind: fStringList, defaulted: true, desc: "Pod CIDRs (default 10.244.0.0/16)."},
			{attr: "service_subnets", path: spec("network", "serviceSubnets"), kind: fStringList, defaulted: true, desc: "Service CIDRs (default 10.96.0.0/12)."},
			{attr: "dns_domain", path: spec("network", "dnsDomain"), defaulted: true, desc: "The cluster's DNS domain (default cluster.local)."},
			{attr: "etcd_backup", path: spec("etcdBackup"), kind: fJSON, defaulted: true, desc: "spec.etcdBackup as JSON: the etcd backup schedule."},
			{attr: "drift_check", path: spec("driftCheck"), kind: fJSON, defaulted: true, desc: "spec.driftCheck as JSON: how often the infrastructure is checked and what a drift does."},
			{attr: "maintenance", path: spec("maintenance"), kind: fJSON, defaulted: true, desc: "spec.maintenance as JSON: the windows disruptive changes wait for."},
			{attr: "schematic", path: spec("schematic"), kind: fJSON, defaulted: true, desc: "spec.schematic as JSON: the Image Factory schematic of every machine."},
		}}

	nodeGroupKind = &kindSpec{typeName: "node_group", plural: "nodegroups", tenantScoped: true,
		readyWords: "every machine of the current spec built and ready", ready: nodeGroupReady,
		desc: "A node group: machines of one role built alike by one infrastructure Provider.",
		fields: []field{
			{attr: "role", path: spec("role"), required: true, forceNew: true, desc: "controlplane or worker."},
			{attr: "machines", path: spec("count"), kind: fInt, required: true, desc: "spec.count: how many machines (count is a reserved word)."},
			{attr: "infrastructure", path: spec("provider"), required: true, forceNew: true, desc: "spec.provider: the name of the Provider that builds the machines (provider is a reserved word)."},
			{attr: "provider_config", path: spec("providerConfig"), kind: fJSON, defaulted: true, desc: "spec.providerConfig as JSON: the Provider's settings for these machines."},
			{attr: "talos_version", path: spec("talosVersion"), canon: canonVersion, desc: "The group's own Talos version (default: the tenant's)."},
			{attr: "node_labels", path: spec("labels"), kind: fStringMap, desc: "spec.labels: labels of the Kubernetes Nodes."},
			{attr: "taints", path: spec("taints"), kind: fJSON, defaulted: true, desc: "spec.taints as JSON: a list of {key, value, effect}."},
			{attr: "max_parallelism", path: spec("updateStrategy", "maxParallelism"), kind: fInt, defaulted: true, desc: "spec.updateStrategy.maxParallelism: machines changed at once."},
			{attr: "drain", path: spec("drain"), kind: fBool, desc: "Whether machines are drained before a reboot (default: yes)."},
			{attr: "drain_timeout", path: spec("drainTimeout"), desc: "How long a drain may take (a Go duration)."},
			{attr: "remediation", path: spec("remediation"), kind: fJSON, defaulted: true, desc: "spec.remediation as JSON: replacing unhealthy machines."},
			{attr: "schematic", path: spec("schematic"), kind: fJSON, defaulted: true, desc: "spec.schematic as JSON: the group's own Image Factory schematic."},
			{attr: "autoscaling", path: spec("autoscaling"), kind: fJSON, defaulted: true, desc: "spec.autoscaling as JSON: {minCount, maxCount, capacity} for the cluster-autoscaler. The autoscaler then moves machines: leave them out of lifecycle changes (ignore_changes = [machines])."},
		}}

	configPatchKind = &kindSpec{typeName: "config_patch", plural: "configpatches", tenantScoped: true,
		desc: "A machine config patch of a tenant, applied to the machines it targets.",
		fields: []field{
			{attr: "target_kind", path: spec("target", "kind"), required: true, desc: "all, role, nodeGroup or machine."},
			{attr: "target_name", path: spec("target", "name"), desc: "The role, node group or machine (none for all)."},
			{attr: "patch", path: spec("patch"), required: true, desc: "The patch: a strategic merge patch or a JSON patch, in YAML or JSON."},
			{attr: "format", path: spec("format"), defaulted: true, desc: "The patch's format (default: strategic merge)."},
			{attr: "enabled", path: spec("enabled"), kind: fBool, defaulted: true, desc: "Whether the patch applies (default true)."},
			{attr: "weight", path: spec("weight"), kind: fInt, defaulted: true, desc: "Patches apply in weight order."},
		}}

	providerKind = &kindSpec{typeName: "provider", plural: "providers",
		desc: "An infrastructure Provider: how node groups naming it are built (emulated, hcloud, openstack, oci, metal, or a module).",
		fields: []field{
			{attr: "type", path: spec("type"), required: true, forceNew: true, desc: "The provider type."},
			{attr: "config", path: spec("config"), kind: fJSON, defaulted: true, desc: "spec.config as JSON."},
			{attr: "credentials_secret", path: spec("credentialsRef", "name"), desc: "spec.credentialsRef.name: the sealed credentials."},
			{attr: "module_files", path: spec("module", "files"), kind: fStringMap, desc: "spec.module.files: a module provider's files, by name."},
			{attr: "tenant_selector", path: spec("tenantSelector"), desc: "Which tenants may use it (a label selector)."},
			{attr: "versions", path: spec("versions"), kind: fJSON, defaulted: true, desc: "spec.versions as JSON: the versions of Talos and Kubernetes it builds."},
		}}

	userKind = &kindSpec{typeName: "user", plural: "users",
		desc: "A user of RezusCloud.",
		fields: []field{
			{attr: "role", path: spec("role"), required: true, desc: "admin, edit, view or none (with bindings)."},
			{attr: "bindings", path: spec("bindings"), kind: fJSON, defaulted: true, desc: "spec.bindings as JSON: roles on some tenants."},
			{attr: "display_name", path: spec("displayName"), desc: "The user's display name."},
			{attr: "disabled", path: spec("disabled"), kind: fBool, desc: "Refuses the user's sessions and tokens."},
			{attr: "password", path: spec("password"), writeOnly: true, sensitive: true,
				desc: "The password (at least 12 characters): sent, never read back; a change ends the user's sessions and tokens."},
		}}

	groupBindingKind = &kindSpec{typeName: "group_binding", plural: "groupbindings",
		desc: "Roles given to the members of single sign-on groups.",
		fields: []field{
			{attr: "groups", path: spec("groups"), kind: fStringList, required: true, desc: "The provider's group names."},
			{attr: "role", path: spec("role"), defaulted: true, desc: "The global role (default none)."},
			{attr: "bindings", path: spec("bindings"), kind: fJSON, defaulted: true, desc: "spec.bindings as JSON: roles on some tenants."},
		}}

	apiTokenKind = &kindSpec{typeName: "api_token", plural: "apitokens",
		desc: "An API token. Its secret is in the state (sensitive) from its creation only: an imported token has none.",
		fields: []field{
			{attr: "user", path: spec("user"), defaulted: true, forceNew: true, desc: "Whose token (default: the caller)."},
			{attr: "description", path: spec("description"), desc: "What it is for."},
			{attr: "expires_at", path: spec("expiresAt"), forceNew: true, canon: canonTime, desc: "When it expires (RFC 3339); none: never."},
			{attr: "bindings", path: spec("bindings"), kind: fJSON, forceNew: true, desc: "spec.bindings as JSON: the token's roles, at most its user's."},
			{attr: "token", path: []string{"token"}, computed: true, sensitive: true, writeOnly: true, desc: "The secret, rzt_<name>_…, answered once."},
		},
		created: func(answer object, state map[string]attr.Value) {
			state["token"] = types.StringNull()
			if t, ok := answer["token"].(string); ok {
				state["token"] = types.StringValue(t)
			}
		}}

	rolloutKind = &kindSpec{typeName: "rollout", plural: "rollouts",
		desc: "A change made on many tenants, wave after wave.",
		fields: []field{
			{attr: "change", path: spec("change"), kind: fJSON, required: true, forceNew: true, desc: "spec.change as JSON: {talosVersion}, {kubernetesVersion}, {configPatch} or {rotate}."},
			{attr: "tenant_selector", path: spec("tenantSelector"), forceNew: true, desc: "The tenants (a label selector; empty: every tenant)."},
			{attr: "waves", path: spec("waves"), kind: fJSON, defaulted: true, forceNew: true, desc: "spec.waves as JSON."},
			{attr: "soak", path: spec("soak"), defaulted: true, desc: "The soak after each wave (a Go duration)."},
			{attr: "paused", path: spec("paused"), kind: fBool, desc: "Nothing further starts while true."},
			{attr: "abort", path: spec("abort"), kind: fBool, desc: "Ends the rollout."},
			{attr: "progress_deadline", path: spec("progressDeadline"), defaulted: true, desc: "How long a wave may go without progress."},
		}}
)

// tenantReady: the last apply built the tenant's current generation and
// its phase is Ready.
func tenantReady(_ context.Context, _ *Client, o object) (bool, string) {
	gen, observed := str(o, "metadata", "generation"), str(o, "status", "observedGeneration")
	if phase := str(o, "status", "phase"); observed != gen || phase != "Ready" {
		return false, fmt.Sprintf("generation %s applied and phase Ready (applied: %s, phase: %s)", gen, orNone(observed), orNone(phase))
	}
	return true, ""
}

// nodeGroupReady: the tenant reconciled (no apply under way or failed)
// and the group's machines, as many as it declares, all ready.
func nodeGroupReady(ctx context.Context, c *Client, o object) (bool, string) {
	tenant, name, count := str(o, "metadata", "tenant"), str(o, "metadata", "name"), str(o, "spec", "count")
	t, err := c.get(ctx, "/api/v1/tenants/"+url.PathEscape(tenant))
	if err != nil {
		return false, "the tenant: " + err.Error()
	}
	reconciled := false
	for _, cond := range asList(lookupOr(t, "status", "conditions")) {
		if m, ok := cond.(map[string]any); ok && m["type"] == "Reconciled" {
			reconciled = m["status"] == "True"
		}
	}
	if !reconciled {
		return false, "the tenant's apply (Reconciled is not True)"
	}
	var list struct{ Items []object }
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/tenants/"+url.PathEscape(tenant)+"/machines", nil, &list); err != nil {
		return false, "its machines: " + err.Error()
	}
	total, ready := 0, 0
	for _, m := range list.Items {
		if str(m, "spec", "nodeGroup") != name || str(m, "metadata", "deletionTimestamp") != "" {
			continue
		}
		total++
		if str(m, "status", "ready") == "true" {
			ready++
		}
	}
	if want := count; strconv.Itoa(total) != want || strconv.Itoa(ready) != want {
		return false, fmt.Sprintf("%s machines ready (%d built, %d ready)", want, total, ready)
	}
	return true, ""
}

func lookupOr(o object, p ...string) any {
	v, _ := lookup(o, p)
	return v
}

func orNone(s string) string {
	if s == "" {
		return "none yet"
	}
	return s
}

// kinds are the provider's resources.
var kinds = []*kindSpec{tenantKind, nodeGroupKind, configPatchKind, providerKind, userKind, groupBindingKind, apiTokenKind, rolloutKind}

func init() {
	for _, k := range kinds {
		seen := map[string]bool{}
		for _, f := range k.allFields() {
			if seen[f.attr] {
				panic(fmt.Sprintf("tfprovider: %s has two fields %s", k.typeName, f.attr))
			}
			seen[f.attr] = true
		}
	}
}
