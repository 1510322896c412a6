package providers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// EndpointPlaceholder is the endpoint host rendered into machine configs
// before the control plane has an address (see GenerateInput.PlaceholderEndpoint).
// The .invalid TLD is reserved (RFC 2606), so it can never resolve by accident.
const EndpointPlaceholder = "rezus-endpoint.invalid"

// Names of the generated files, as the runner writes them into the work dir.
const (
	MainFileName = "main.tf.json"
	// VarsFileName is auto-loaded by tofu; it holds the sensitive variables.
	VarsFileName = "rezus.auto.tfvars.json"
)

// EndpointOutput is the root output holding the address generated for the
// control-plane endpoint, present when the tenant declares no
// spec.controlPlane.endpoint (read it back with StateEndpoint).
const EndpointOutput = "control_plane_endpoint_address"

// GenerateInput is everything a tenant's configuration is generated from.
type GenerateInput struct {
	Tenant *domain.Tenant
	// Providers are the Provider objects by name: every one the groups name,
	// plus every one resources in the current state still use (ProvidersInState),
	// so that the resources of a removed node group can be destroyed. Each gets
	// a provider block.
	Providers map[string]*domain.Provider
	// Groups are the tenant's node groups, sorted by name.
	Groups []GroupInput
	// PlaceholderEndpoint is true when the tenant has no spec.controlPlane.endpoint
	// and no control-plane machine has an address yet: the configs then contain
	// EndpointPlaceholder as the endpoint host, and the generated configuration
	// replaces it with the address it creates for the control plane.
	PlaceholderEndpoint bool
	// Modules checks the modules of module providers (the server's mirror
	// and --allow-module-exec); the zero value checks all but the sources.
	Modules ModuleChecker
	// StateModules are the module calls the state holds resources of
	// (ModulesInState): a call whose group is gone, or that moved to another
	// provider, is kept with no machines so that tofu destroys what it built
	// with the module's own provider configuration.
	StateModules []ModuleUse
	// ImageFactory is the Image Factory URL installers come from; "" is
	// the public one.
	ImageFactory string
}

// GroupInput is one node group and its machines.
type GroupInput struct {
	NodeGroup *domain.NodeGroup
	// Machines in index order.
	Machines []MachineInput
}

// MachineInput is one machine to build.
type MachineInput struct {
	// Name is "<nodegroup>-<index>".
	Name string
	// Config is the rendered machine config, given to the machine as user data.
	Config []byte
}

// Files are the generated configuration.
type Files struct {
	// Main is main.tf.json (MainFileName).
	Main []byte
	// Vars is rezus.auto.tfvars.json (VarsFileName): the machine configs, as the
	// values of sensitive variables, so tofu never prints them.
	Vars []byte
	// Modules are the files of the module providers the configuration
	// calls, by Provider name: written to ModulesDir/<name>/.
	Modules map[string]map[string]string
}

// Generate writes the OpenTofu configuration (JSON syntax) that builds a
// tenant's node groups on their providers.
//
// The shape of what it writes, for every provider type:
//   - one provider block per Provider, aliased ProviderAlias(name), with the
//     non-secret settings of spec.config; credentials come from environment
//     variables (ProviderType.CredentialEnv) the runner sets;
//   - per node group one instance resource named GroupResourceName(group),
//     for_each over the machine names (so a machine's index key in the state is
//     its name), with lifecycle.ignore_changes on the user data (and, for
//     clouds, the image): config changes and upgrades go through the Talos API
//     and never recreate a machine;
//   - the machine configs only as sensitive variables (user_data_<group>,
//     map(string) by machine name) whose values are in Files.Vars;
//   - when the tenant declares no spec.controlPlane.endpoint: an address for the
//     control plane made by the provider of the first control-plane group (name
//     order), the root output EndpointOutput holding it, and, when
//     PlaceholderEndpoint, every machine's user data with EndpointPlaceholder
//     replaced by it. The address resources are generated on every apply, not
//     only while the placeholder is in use, so that they (and the machine booted
//     on them) stay put.
//
// A Provider built with a module (type module, and the built-in emulated
// type, which is an embedded module) gets no provider block: each of its
// node groups gets a module call ModuleName(group, provider) from
// ./modules/<provider> (Files.Modules), with the contract's inputs it
// declares and its own variables from spec.config, and a root output
// rezus_machines_<GroupResourceName> holding the module's machines output,
// which ProjectState reads. A call the state still holds resources of, whose
// group is gone, is kept with no machines (GenerateInput.StateModules).
//
// A bad spec.config or spec.providerConfig is a domain Invalid error naming the
// field. The output is checked (parsed with hcl's JSON parser, references
// resolved) before it is returned; a failure there is a "generator bug" error.
// The output is deterministic: the same input gives the same bytes.
func Generate(in GenerateInput) (Files, error) {
	b, err := newTFBuilder(in)
	if err != nil {
		return Files{}, err
	}
	if err := b.build(); err != nil {
		return Files{}, err
	}
	if len(b.bugs) > 0 {
		return Files{}, fmt.Errorf("generator bug: %s", strings.Join(b.bugs, "; "))
	}
	main, err := encodeTFJSON(b.root)
	if err != nil {
		return Files{}, fmt.Errorf("generator bug: encoding %s: %w", MainFileName, err)
	}
	vars, err := encodeTFJSON(b.vars)
	if err != nil {
		return Files{}, fmt.Errorf("generator bug: encoding %s: %w", VarsFileName, err)
	}
	if err := checkGenerated(main, vars); err != nil {
		return Files{}, fmt.Errorf("generator bug: %w", err)
	}
	return Files{Main: main, Vars: vars, Modules: b.moduleFiles()}, nil
}

// ProviderAlias is the provider alias of a Provider object: a valid identifier
// that maps back to the name (ProviderNameFromAlias). Provider names are
// DNS-1123 labels, which have no '_' and may start with a digit.
func ProviderAlias(name string) string {
	return "p_" + strings.ReplaceAll(name, "-", "_")
}

// ProviderNameFromAlias is the inverse of ProviderAlias.
func ProviderNameFromAlias(alias string) (string, bool) {
	rest, ok := strings.CutPrefix(alias, "p_")
	if !ok || rest == "" {
		return "", false
	}
	return strings.ReplaceAll(rest, "_", "-"), true
}

// GroupResourceName is the name of a node group's instance resource, "ng_<group>".
func GroupResourceName(group string) string {
	return "ng_" + strings.ReplaceAll(group, "-", "_")
}

// GroupFromResourceName is the inverse of GroupResourceName.
func GroupFromResourceName(resource string) (string, bool) {
	rest, ok := strings.CutPrefix(resource, "ng_")
	if !ok || rest == "" {
		return "", false
	}
	return strings.ReplaceAll(rest, "_", "-"), true
}

// userDataVar is the sensitive variable holding a group's machine configs.
func userDataVar(group string) string {
	return "user_data_" + strings.ReplaceAll(group, "-", "_")
}

// tfProviderUse is one Provider object and the groups it builds.
type tfProviderUse struct {
	name string
	obj  *domain.Provider
	typ  *ProviderType
	// ref is the provider meta-argument, "<local name>.<alias>".
	ref string
	// cfg is the decoded spec.config (the type's own struct).
	cfg    any
	groups []*tfGroup
	// mod is set for a provider built with a module (ModuleName calls).
	mod *tfModule
}

// tfGroup is one node group being generated.
type tfGroup struct {
	name     string
	ng       *domain.NodeGroup
	use      *tfProviderUse
	res      string // GroupResourceName
	varName  string // userDataVar
	machines []MachineInput
	cfg      any // decoded spec.providerConfig
}

// controlPlane reports whether the group's machines are control-plane nodes.
func (g *tfGroup) controlPlane() bool { return g.ng.Spec.Role == domain.RoleControlPlane }

// CloudName is the name a machine gets in the infrastructure, and the
// hostname the built-in providers give it: prefixed with the tenant, because
// clouds and the emulator are shared by tenants.
func CloudName(tenant, machine string) string {
	return tenant + "-" + machine
}

func (b *tfBuilder) cloudName(machine string) string {
	return CloudName(b.tenant.Metadata.Name, machine)
}

// tfBuilder accumulates the JSON documents of one Generate call.
type tfBuilder struct {
	in     GenerateInput
	tenant *domain.Tenant
	uses   []*tfProviderUse // by name
	groups []*tfGroup       // by name
	root   map[string]any
	vars   map[string]any
	// endpointGroup and endpointExpr are set when the generated configuration
	// makes the control-plane endpoint address: the group whose first machine
	// it is for, and the HCL expression of the address.
	endpointGroup *tfGroup
	endpointExpr  string
	// bugs are inconsistencies found while building (a resource added twice).
	bugs []string
}

func newTFBuilder(in GenerateInput) (*tfBuilder, error) {
	if in.Tenant == nil {
		return nil, fmt.Errorf("generating: no tenant")
	}
	b := &tfBuilder{in: in, tenant: in.Tenant, root: map[string]any{}, vars: map[string]any{}}
	var err error
	names := make([]string, 0, len(in.Providers))
	for name := range in.Providers {
		names = append(names, name)
	}
	sort.Strings(names)
	byName := map[string]*tfProviderUse{}
	for _, name := range names {
		p := in.Providers[name]
		if p == nil {
			return nil, fmt.Errorf("generating: provider %q is nil", name)
		}
		if causes := domain.ValidateName(name, "metadata.name"); causes != nil {
			return nil, domain.NewInvalid(domain.ProviderKind.Kind, name, causes)
		}
		typ, ok := tofuType(p.Spec.Type)
		if !ok {
			return nil, domain.NewInvalid(domain.ProviderKind.Kind, name, []domain.Cause{{Field: "spec.type", Type: domain.CauseNotSupported,
				Message: fmt.Sprintf("%q cannot be built with OpenTofu; supported: %s", p.Spec.Type, strings.Join(TofuTypeNames(), ", "))}})
		}
		cfg, causes := decodeSpecConfig(typ, &p.Spec)
		if len(causes) > 0 {
			return nil, domain.NewInvalid(domain.ProviderKind.Kind, name, causes)
		}
		u := &tfProviderUse{name: name, obj: p, typ: typ, ref: typ.LocalName + "." + ProviderAlias(name), cfg: cfg}
		if u.mod, err = b.moduleOf(p, typ, cfg); err != nil {
			return nil, err
		}
		b.uses = append(b.uses, u)
		byName[name] = u
	}
	seen := map[string]bool{}
	for i, gi := range in.Groups {
		ng := gi.NodeGroup
		if ng == nil {
			return nil, fmt.Errorf("generating: group %d has no node group", i)
		}
		name := ng.Metadata.Name
		if causes := domain.ValidateName(name, "metadata.name"); causes != nil {
			return nil, domain.NewInvalid(domain.NodeGroupKind.Kind, name, causes)
		}
		if seen[name] {
			return nil, fmt.Errorf("generating: node group %q given twice", name)
		}
		seen[name] = true
		u, ok := byName[ng.Spec.Provider]
		if !ok {
			return nil, domain.NewInvalid(domain.NodeGroupKind.Kind, name, []domain.Cause{{Field: "spec.provider", Type: domain.CauseNotSupported,
				Message: fmt.Sprintf("provider %q not found", ng.Spec.Provider)}})
		}
		// The Provider's tenants may have narrowed since the group was
		// written: checked again at every apply.
		if in.Tenant != nil && u.obj != nil && !u.obj.Spec.AllowsTenant(in.Tenant.Metadata.Labels) {
			return nil, domain.NewInvalid(domain.NodeGroupKind.Kind, name, []domain.Cause{
				domain.TenantRefused("spec.provider", ng.Spec.Provider, in.Tenant.Metadata.Name, u.obj.Spec.TenantSelector)})
		}
		cfg, causes := u.typ.gen.decodeGroupConfig(ng.Spec.ProviderConfig)
		if len(causes) > 0 {
			return nil, domain.NewInvalid(domain.NodeGroupKind.Kind, name, causes)
		}
		g := &tfGroup{name: name, ng: ng, use: u, res: GroupResourceName(name), varName: userDataVar(name), cfg: cfg}
		mseen := map[string]bool{}
		// The group's machines in order: 0..count-1, or the indexes its
		// spec.members lists (an autoscaler removed others).
		names := ng.Spec.MachineNames(name)
		for j, m := range gi.Machines {
			want := fmt.Sprintf("%s-%d", name, j)
			if j < len(names) {
				want = names[j]
			}
			if m.Name != want {
				return nil, fmt.Errorf("generating: node group %s: machine %d is named %q, want %q", name, j, m.Name, want)
			}
			if mseen[m.Name] {
				return nil, fmt.Errorf("generating: machine %q given twice", m.Name)
			}
			mseen[m.Name] = true
			if len(m.Config) == 0 {
				return nil, fmt.Errorf("generating: machine %s has no config", m.Name)
			}
			if len(b.cloudName(m.Name)) > domain.MaxNameLength {
				return nil, domain.NewInvalid(domain.NodeGroupKind.Kind, name, []domain.Cause{{Field: "metadata.name", Type: domain.CauseTooLong,
					Message: fmt.Sprintf("machine name %q is longer than %d characters; shorten the tenant or node group name", b.cloudName(m.Name), domain.MaxNameLength)}})
			}
		}
		g.machines = gi.Machines
		u.groups = append(u.groups, g)
		b.groups = append(b.groups, g)
	}
	sort.Slice(b.groups, func(i, j int) bool { return b.groups[i].name < b.groups[j].name })
	for _, u := range b.uses {
		sort.Slice(u.groups, func(i, j int) bool { return u.groups[i].name < u.groups[j].name })
	}
	return b, nil
}

func (b *tfBuilder) build() error {
	tenant := b.tenant.Metadata.Name
	b.root["//"] = fmt.Sprintf("Generated by RezusCloud for tenant %s; do not edit: it is rewritten on every apply.", tenant)
	required := map[string]any{}
	providers := map[string]any{}
	for _, u := range b.uses {
		if u.mod != nil {
			continue // the module configures its providers itself
		}
		required[u.typ.LocalName] = map[string]any{"source": u.typ.Source, "version": u.typ.Version}
		args := u.typ.gen.providerArgs(u.cfg)
		args["alias"] = ProviderAlias(u.name)
		list, _ := providers[u.typ.LocalName].([]any)
		providers[u.typ.LocalName] = append(list, args) // b.uses is sorted by name, so the list is too
	}
	if len(required) > 0 {
		b.root["terraform"] = map[string]any{"required_providers": required}
		b.root["provider"] = providers
	}

	if b.in.PlaceholderEndpoint && b.tenant.Spec.ControlPlane.Endpoint != "" {
		return fmt.Errorf("generating: the endpoint placeholder is in use while the tenant declares spec.controlPlane.endpoint %q", b.tenant.Spec.ControlPlane.Endpoint)
	}
	var cp *tfGroup
	for _, g := range b.groups {
		if g.controlPlane() && len(g.machines) > 0 {
			cp = g
			break
		}
	}
	if b.tenant.Spec.ControlPlane.Endpoint == "" && cp != nil {
		var (
			expr string
			err  error
		)
		if cp.use.mod != nil && cp.use.obj.Spec.Type == domain.ProviderModule {
			expr, err = b.moduleEndpoint(cp)
		} else {
			expr, err = cp.use.typ.gen.endpoint(b, cp)
		}
		if err != nil {
			return err
		}
		b.endpointGroup, b.endpointExpr = cp, expr
		b.output(EndpointOutput, map[string]any{
			"description": "The address of the control-plane endpoint (https://<address>:6443).",
			"value":       "${" + expr + "}",
		})
	}
	if b.in.PlaceholderEndpoint && b.endpointExpr == "" {
		return fmt.Errorf("tenant %s: the machine configs need a control-plane endpoint, but there is no control-plane node group with machines to give one; add one or set spec.controlPlane.endpoint", tenant)
	}

	for _, g := range b.groups {
		if len(g.machines) == 0 {
			continue
		}
		configs := map[string]any{}
		for _, m := range g.machines {
			configs[m.Name] = string(m.Config)
		}
		b.vars[g.varName] = configs
		b.variable(g.varName, map[string]any{
			"description": fmt.Sprintf("The machine configs of node group %s, by machine name.", g.name),
			"type":        "map(string)",
			"sensitive":   true,
		})
	}
	for _, u := range b.uses {
		if u.mod != nil {
			b.moduleCalls(u)
			continue
		}
		if err := u.typ.gen.resources(b, u); err != nil {
			return err
		}
	}
	return nil
}

// userData is the HCL expression of a machine's user data (plain text) in a
// for_each resource of group g.
func (b *tfBuilder) userData(g *tfGroup) string {
	v := fmt.Sprintf("var.%s[each.key]", g.varName)
	if b.in.PlaceholderEndpoint {
		v = fmt.Sprintf("replace(%s, %q, %s)", v, EndpointPlaceholder, b.endpointExpr)
	}
	return v
}

// firstMachine is the machine the endpoint is made for: the first of the group.
func (g *tfGroup) firstMachine() string { return g.machines[0].Name }

// forEach is a group's for_each map: machine name -> per-machine values
// (always at least the cloud name under "name").
func (b *tfBuilder) forEach(g *tfGroup, extra func(i int, m MachineInput) map[string]any) map[string]any {
	out := map[string]any{}
	for i, m := range g.machines {
		v := map[string]any{"name": lit(b.cloudName(m.Name))}
		if extra != nil {
			for k, x := range extra(i, m) {
				v[k] = x
			}
		}
		out[m.Name] = v
	}
	return out
}

func (b *tfBuilder) section(kind string) map[string]any {
	s, ok := b.root[kind].(map[string]any)
	if !ok {
		s = map[string]any{}
		b.root[kind] = s
	}
	return s
}

// resource adds resource "typ" "name"; a second resource of that address is a bug.
func (b *tfBuilder) resource(typ, name string, body map[string]any) {
	b.labelled("resource", typ, name, body)
}

// data adds data "typ" "name".
func (b *tfBuilder) data(typ, name string, body map[string]any) {
	b.labelled("data", typ, name, body)
}

func (b *tfBuilder) labelled(kind, typ, name string, body map[string]any) {
	s := b.section(kind)
	byType, ok := s[typ].(map[string]any)
	if !ok {
		byType = map[string]any{}
		s[typ] = byType
	}
	if _, dup := byType[name]; dup {
		b.bugs = append(b.bugs, fmt.Sprintf("%s %s.%s added twice", kind, typ, name))
		return
	}
	byType[name] = body
}

func (b *tfBuilder) variable(name string, body map[string]any) { b.section("variable")[name] = body }

func (b *tfBuilder) output(name string, body map[string]any) { b.section("output")[name] = body }

// lit makes s a literal string in JSON syntax, where strings are templates:
// "${" and "%{" are escaped so that a user's value is never evaluated.
func lit(s string) string {
	s = strings.ReplaceAll(s, "${", "$${")
	return strings.ReplaceAll(s, "%{", "%%{")
}

// lits applies lit to every string of ss.
func lits(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = lit(s)
	}
	return out
}

// encodeTFJSON writes v as indented JSON; encoding/json sorts map keys, so the
// bytes are deterministic. HTML escaping is off: it would only obscure "<>&".
func encodeTFJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
