package providers

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Module providers: a Provider of type module (and a built-in type shipped
// as a module, emulated) builds each node group with a child module,
// instantiated once per group as module "<ModuleName(group, provider)>" from
// ./modules/<provider>. The module's files are written there by the runner;
// its provider blocks are its own (a module is self-contained), so nothing
// of it is configured at the root but the module call.

// ModulesDir is the directory, in a tenant's work dir, of the module providers' files.
const ModulesDir = "modules"

// moduleMachinesOutput prefixes the root outputs that hold each group's
// module's machines output: moduleMachinesOutput + GroupResourceName(group).
const moduleMachinesOutput = "rezus_machines_"

//go:embed modules/emulated/*.tf
var builtinModules embed.FS

// embeddedModule reads a built-in module's files.
func embeddedModule(name string) *domain.ModuleSource {
	m := &domain.ModuleSource{Files: map[string]string{}}
	dir := path.Join("modules", name)
	entries, err := fs.ReadDir(builtinModules, dir)
	if err != nil {
		panic(fmt.Sprintf("built-in module %s: %v", name, err))
	}
	for _, e := range entries {
		b, err := fs.ReadFile(builtinModules, path.Join(dir, e.Name()))
		if err != nil {
			panic(fmt.Sprintf("built-in module %s: %v", name, err))
		}
		m.Files[e.Name()] = string(b)
	}
	return m
}

// BuiltinModule returns the files of the module a built-in provider type is
// written as (emulated), and false for the other types.
func BuiltinModule(typ string) (*domain.ModuleSource, bool) {
	t, ok := tofuType(typ)
	if !ok {
		return nil, false
	}
	mb, ok := t.gen.(moduleBacked)
	if !ok {
		return nil, false
	}
	src := mb.module()
	out := &domain.ModuleSource{Files: make(map[string]string, len(src.Files))}
	for k, v := range src.Files {
		out.Files[k] = v
	}
	return out, true
}

// moduleBacked is a built-in provider type whose machines a module builds.
type moduleBacked interface {
	// module is the type's module.
	module() *domain.ModuleSource
	// moduleVars are the module's own variables for a decoded spec.config.
	moduleVars(cfg any) map[string]any
}

// ModuleName is the module call of a node group built by a module provider:
// "ng_<group>__<provider>". Names are DNS labels (no '_'), so it parses back
// (ParseModuleName), and a group that moves to another provider gets a new
// call, whose machines are built while the old call's are destroyed.
func ModuleName(group, provider string) string { return "ng_" + group + "__" + provider }

// ParseModuleName is the inverse of ModuleName; it also takes a state's
// module address ("module.ng_<group>__<provider>").
func ParseModuleName(name string) (group, provider string, ok bool) {
	name = strings.TrimPrefix(name, "module.")
	rest, ok := strings.CutPrefix(name, "ng_")
	if !ok {
		return "", "", false
	}
	group, provider, ok = strings.Cut(rest, "__")
	if !ok || group == "" || provider == "" || strings.Contains(provider, ".") {
		return "", "", false
	}
	return group, provider, true
}

// ModuleUse is one module call the state holds resources of.
type ModuleUse struct {
	Group    string `json:"group"`
	Provider string `json:"provider"`
}

// tfModule is a module provider's module as one Generate call uses it.
type tfModule struct {
	files *domain.ModuleSource
	info  *ModuleInfo
	// vars are the module's own variables (JSON-syntax values).
	vars map[string]any
}

// moduleOf prepares the module of a Provider built with one: type module
// (checked with the input's checker) or a module-backed built-in type.
func (b *tfBuilder) moduleOf(p *domain.Provider, typ *ProviderType, cfg any) (*tfModule, error) {
	if p.Spec.Type == domain.ProviderModule {
		info, causes := b.in.Modules.Check(&p.Spec)
		if len(causes) > 0 {
			return nil, domain.NewInvalid(domain.ProviderKind.Kind, p.Metadata.Name, causes)
		}
		var own map[string]json.RawMessage
		if len(p.Spec.Config) > 0 {
			if err := json.Unmarshal(p.Spec.Config, &own); err != nil {
				return nil, domain.NewInvalid(domain.ProviderKind.Kind, p.Metadata.Name, []domain.Cause{{Field: "spec.config", Type: domain.CauseInvalid, Message: err.Error()}})
			}
		}
		vars := map[string]any{}
		for k, raw := range own {
			v, err := jsonSyntaxValue(raw)
			if err != nil {
				return nil, domain.NewInvalid(domain.ProviderKind.Kind, p.Metadata.Name, []domain.Cause{{Field: field.NewPath("spec", "config").Child(k).String(), Type: domain.CauseInvalid, Message: err.Error()}})
			}
			vars[k] = v
		}
		return &tfModule{files: p.Spec.Module, info: info, vars: vars}, nil
	}
	mb, ok := typ.gen.(moduleBacked)
	if !ok {
		return nil, nil
	}
	files := mb.module()
	info, causes := ModuleChecker{}.Check(&domain.ProviderSpec{Type: domain.ProviderModule, Module: files, Config: mustJSON(mb.moduleVars(cfg))})
	if len(causes) > 0 {
		return nil, fmt.Errorf("generator bug: the built-in %s module: %s", typ.Type, causes[0].Field+": "+causes[0].Message)
	}
	vars := map[string]any{}
	for k, v := range mb.moduleVars(cfg) {
		vars[k] = v
	}
	return &tfModule{files: files, info: info, vars: vars}, nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// jsonSyntaxValue turns a JSON value into the value of a module argument in
// OpenTofu's JSON syntax, where strings are templates: every string is
// escaped (lit), so a user's value is never evaluated.
func jsonSyntaxValue(raw json.RawMessage) (any, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return escapeJSONStrings(v), nil
}

func escapeJSONStrings(v any) any {
	switch v := v.(type) {
	case string:
		return lit(v)
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = escapeJSONStrings(x)
		}
		return out
	case map[string]any:
		// Keys are templates too in OpenTofu's JSON syntax.
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[lit(k)] = escapeJSONStrings(x)
		}
		return out
	default:
		return v
	}
}

// moduleCall adds the module call of group (g, or a group that is gone
// whose resources the state still holds: g nil, no machines) built by u.
func (b *tfBuilder) moduleCall(u *tfProviderUse, group string, g *tfGroup) {
	m := u.mod
	name := ModuleName(group, u.name)
	body := map[string]any{"source": "./" + ModulesDir + "/" + u.name}
	for k, v := range m.vars {
		body[k] = v
	}
	machines := map[string]any{}
	role, version, image, schematic := "", "", "", ""
	providerConfig := map[string]any{}
	if g != nil {
		role = g.ng.Spec.Role
		version = g.ng.Spec.TalosVersion
		if version == "" {
			version = b.tenant.Spec.TalosVersion
		}
		install, err := domain.ReadInstallSettings(g.ng.Spec.ProviderConfig)
		if err != nil {
			// Validated when written: a stored config that is not is a bug.
			b.bugs = append(b.bugs, fmt.Sprintf("node group %s: %v", g.ng.Metadata.Name, err))
		}
		// The day-0 installer, as the machines' configs name it: an explicit
		// installImage as it is, else the factory's of the group's schematic.
		image = install.InstallImage
		if image == "" {
			factory := b.in.ImageFactory
			if factory == "" {
				factory = domain.DefaultImageFactory
			}
			inst := domain.InstallerOf(factory, &b.tenant.Spec, &g.ng.Spec, version)
			image, schematic = inst.Image, inst.Schematic
		}
		if len(g.ng.Spec.ProviderConfig) > 0 {
			if v, err := jsonSyntaxValue(g.ng.Spec.ProviderConfig); err == nil {
				if obj, ok := v.(map[string]any); ok {
					providerConfig = obj
				}
			}
		}
		for _, mi := range g.machines {
			machines[mi.Name] = map[string]any{
				"config":   "${" + b.userDataKey(g, mi.Name) + "}",
				"hostname": lit(b.cloudName(mi.Name)),
			}
		}
	}
	inputs := map[string]any{
		ModuleVarTenant:         lit(b.tenant.Metadata.Name),
		ModuleVarNodeGroup:      lit(group),
		ModuleVarRole:           lit(role),
		ModuleVarTalosVersion:   lit(version),
		ModuleVarInstallImage:   lit(image),
		ModuleVarSchematicID:    lit(schematic),
		ModuleVarMachines:       machines,
		ModuleVarEndpoint:       lit(b.tenant.Spec.ControlPlane.Endpoint),
		ModuleVarProviderConfig: providerConfig,
	}
	for _, in := range m.info.Inputs {
		body[in] = inputs[in]
	}
	b.section("module")[name] = body
	b.output(moduleMachinesOutput+GroupResourceName(group), map[string]any{
		"description": fmt.Sprintf("The machines of node group %s, as its module built them.", group),
		"value":       "${module." + name + "." + ModuleOutputMachines + "}",
		// A module's output may derive from sensitive values; the state
		// keeps it either way, and the projection reads it there.
		"sensitive": true,
	})
}

// userDataKey is the HCL expression of one machine's user data.
func (b *tfBuilder) userDataKey(g *tfGroup, machine string) string {
	v := fmt.Sprintf("var.%s[%q]", g.varName, machine)
	if b.in.PlaceholderEndpoint {
		v = fmt.Sprintf("replace(%s, %q, %s)", v, EndpointPlaceholder, b.endpointExpr)
	}
	return v
}

// moduleEndpoint is the expression of the endpoint address a module call
// makes for control-plane group cp.
func (b *tfBuilder) moduleEndpoint(cp *tfGroup) (string, error) {
	if !cp.use.mod.info.Endpoint {
		return "", domain.NewInvalid(domain.ProviderKind.Kind, cp.use.name, []domain.Cause{{Field: "spec.module", Type: domain.CauseRequired,
			Message: fmt.Sprintf("tenant %s declares no spec.controlPlane.endpoint and the module of provider %s, which builds its control plane, outputs no %q; set the tenant's endpoint or make the module output one (a load balancer's or reserved address)",
				b.tenant.Metadata.Name, cp.use.name, ModuleOutputEndpoint)}})
	}
	return "module." + ModuleName(cp.name, cp.use.name) + "." + ModuleOutputEndpoint, nil
}

// moduleFiles are the files of every module the configuration calls, by provider.
func (b *tfBuilder) moduleFiles() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, u := range b.uses {
		if u.mod != nil {
			out[u.name] = u.mod.files.Files
		}
	}
	return out
}

// moduleCalls adds the module calls of u: one per node group it builds
// (with or without machines), and one with no machines per call the state
// still holds resources of whose group is gone or uses another provider now.
func (b *tfBuilder) moduleCalls(u *tfProviderUse) {
	declared := map[string]bool{}
	for _, g := range u.groups {
		declared[g.name] = true
		b.moduleCall(u, g.name, g)
	}
	for _, sm := range b.in.StateModules {
		if sm.Provider == u.name && !declared[sm.Group] {
			declared[sm.Group] = true
			b.moduleCall(u, sm.Group, nil)
		}
	}
	if mv, ok := u.typ.gen.(movedFromBuiltin); ok {
		mv.moved(b, u)
	}
}

// movedFromBuiltin is a built-in type that was generated resource by
// resource before it was a module: it moves what older runs built into the
// module calls instead of rebuilding it.
type movedFromBuiltin interface {
	moved(b *tfBuilder, u *tfProviderUse)
}

// moved adds a moved block.
func (b *tfBuilder) moved(from, to string) {
	list, _ := b.root["moved"].([]any)
	b.root["moved"] = append(list, map[string]any{"from": from, "to": to})
}

// moduleType is Provider.spec.type module: the module in spec.module builds
// the machines. Its spec.config holds the module's own variables (checked
// against the module by ModuleChecker); a node group's providerConfig is
// any object, given to the module as provider_config.
var moduleType = ProviderType{
	Type:   domain.ProviderModule,
	config: moduleGen{},
	gen:    moduleGen{},
}

type moduleGen struct{}

func (moduleGen) decodeConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg map[string]json.RawMessage
	if causes := decodeStrictObject(raw, &cfg, "spec.config"); causes != nil {
		return nil, causes
	}
	return cfg, nil
}

func (moduleGen) decodeGroupConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg map[string]json.RawMessage
	if causes := decodeStrictObject(raw, &cfg, "spec.providerConfig"); causes != nil {
		return nil, causes
	}
	if causes := configKeyCauses(raw, "spec.providerConfig"); causes != nil {
		return nil, causes
	}
	// The renderer's keys keep their meaning.
	for _, k := range []string{"installDisk", "installImage"} {
		if v, ok := cfg[k]; ok {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return nil, []domain.Cause{{Field: field.NewPath("spec", "providerConfig").Child(k).String(), Type: domain.CauseInvalid, Message: "must be a string"}}
			}
		}
	}
	return cfg, nil
}

func (moduleGen) providerArgs(any) map[string]any { return nil }

func (moduleGen) endpoint(*tfBuilder, *tfGroup) (string, error) {
	return "", fmt.Errorf("generator bug: a module provider's endpoint is its module's output")
}

func (moduleGen) resources(*tfBuilder, *tfProviderUse) error {
	return fmt.Errorf("generator bug: a module provider's resources are its module's")
}
