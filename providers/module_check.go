package providers

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"

	"github.com/rezuscloud/rezuscloud/domain"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A module provider (Provider.spec.type "module") builds a node group's
// machines with an OpenTofu module held in Provider.spec.module. The contract
// (docs/providers.md):
//
//   - inputs RezusCloud sets, each only when the module declares it:
//     tenant, node_group, role, talos_version, install_image, schematic_id
//     (strings; schematic_id is the Image Factory schematic install_image
//     carries, "" when the group names its own installImage),
//     machines (map of machine name to {config, hostname}: the machines the
//     group wants, each with its day-0 machine config, sensitive), endpoint
//     (the tenant's spec.controlPlane.endpoint URL, "" when the tenant
//     declares none), provider_config (the node group's spec.providerConfig
//     as an object); every other variable is the module's own and takes its
//     value from Provider.spec.config (or its default);
//   - outputs: machines (map of machine name to {address, provider_id,
//     shape?, hostname?}), which the machine projection reads; optionally
//     endpoint (an address for the control plane, made when the module builds
//     a control-plane group of a tenant that declares no endpoint).

// Module inputs: the variables RezusCloud sets.
const (
	ModuleVarTenant         = "tenant"
	ModuleVarNodeGroup      = "node_group"
	ModuleVarRole           = "role"
	ModuleVarTalosVersion   = "talos_version"
	ModuleVarInstallImage   = "install_image"
	ModuleVarSchematicID    = "schematic_id"
	ModuleVarMachines       = "machines"
	ModuleVarEndpoint       = "endpoint"
	ModuleVarProviderConfig = "provider_config"
)

// Module outputs the projection reads.
const (
	ModuleOutputMachines = "machines"
	ModuleOutputEndpoint = "endpoint"
)

// moduleInputs are the variables RezusCloud sets, sorted.
var moduleInputs = []string{
	ModuleVarEndpoint, ModuleVarInstallImage, ModuleVarMachines, ModuleVarNodeGroup,
	ModuleVarProviderConfig, ModuleVarRole, ModuleVarSchematicID, ModuleVarTalosVersion, ModuleVarTenant,
}

// defaultProviderHost is where a provider source without a host lives.
const defaultProviderHost = "registry.opentofu.org"

// ModuleChecker checks a module provider's files when it is written and
// before every run: the checks that need no tofu (syntax, the contract, what
// RezusCloud refuses to run). `tofu validate` comes after, asynchronously
// (ModuleValidator).
type ModuleChecker struct {
	// Available are the provider addresses (host/namespace/type, lower case)
	// tofu can install; nil when providers install from the registries, which
	// leaves the sources unchecked.
	Available map[string]bool
	// AllowExec lets modules use the local-exec, remote-exec and file
	// provisioners, which run commands on the management plane's host or
	// copy files to machines (serve --allow-module-exec).
	AllowExec bool
	// Unsandboxed refuses module providers: tofu runs without its sandbox
	// here, and a module's functions would read the server's secrets
	// (serve --tofu-sandbox=auto where namespaces are not allowed).
	Unsandboxed bool
	// NoMirror refuses module providers: without a provider mirror tofu
	// would install any provider a module names from its registry, and run
	// it on this host (serve without --provider-mirror, unless
	// --allow-provider-downloads).
	NoMirror bool
}

// NewModuleChecker returns a checker for the providers in a filesystem
// mirror ("" when providers install from the registries).
func NewModuleChecker(mirror string, allowExec bool) (ModuleChecker, error) {
	c := ModuleChecker{AllowExec: allowExec}
	if mirror == "" {
		return c, nil
	}
	addrs, err := MirrorProviders(mirror)
	if err != nil {
		return c, err
	}
	c.Available = map[string]bool{}
	for _, a := range addrs {
		c.Available[strings.ToLower(a)] = true
	}
	return c, nil
}

// ModuleInfo is what a run needs to know of a checked module.
type ModuleInfo struct {
	// Inputs are the contract variables the module declares, sorted (only
	// those are set: tofu refuses a value for an undeclared variable).
	Inputs []string
	// Own are the module's own variables, by name: true when it has a default.
	Own map[string]bool
	// Endpoint is true when the module outputs endpoint.
	Endpoint bool
	// Providers maps each local provider name to its source address
	// (host/namespace/type).
	Providers map[string]string
}

// Declares reports whether the module declares the contract input name.
func (m *ModuleInfo) Declares(name string) bool { return slices.Contains(m.Inputs, name) }

// modulePos is one finding at a place in a file.
type moduleFinding struct {
	file      string
	line, col int
	typ, msg  string
}

// moduleFileSchema is what a module file may hold at its top level.
var moduleFileSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
	{Type: "terraform"},
	{Type: "variable", LabelNames: []string{"name"}},
	{Type: "output", LabelNames: []string{"name"}},
	{Type: "provider", LabelNames: []string{"name"}},
	{Type: "resource", LabelNames: []string{"type", "name"}},
	{Type: "data", LabelNames: []string{"type", "name"}},
	{Type: "ephemeral", LabelNames: []string{"type", "name"}},
	{Type: "module", LabelNames: []string{"name"}},
	{Type: "locals"},
	{Type: "moved"},
	{Type: "import"},
	{Type: "removed"},
	{Type: "check", LabelNames: []string{"name"}},
}}

var terraformBlockSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
	{Type: "required_providers"},
	{Type: "backend", LabelNames: []string{"type"}},
	{Type: "cloud"},
}}

var variableBlockSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "default"}}}

var resourceBlockSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "provider"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "provisioner", LabelNames: []string{"type"}}},
}

// Check parses every file of a module provider's spec and checks it against
// the contract: each finding is a cause at spec.module.files[<file>] whose
// message starts with line:column. Its spec.config must give a value for
// every own variable without a default and nothing else. It returns what a
// run needs of the module.
func (c ModuleChecker) Check(spec *domain.ProviderSpec) (*ModuleInfo, []domain.Cause) {
	if spec.Type != domain.ProviderModule || spec.Module == nil {
		return nil, nil
	}
	if c.Unsandboxed {
		return nil, []domain.Cause{{Field: "spec.type", Type: domain.CauseForbidden,
			Message: "this server runs tofu without its sandbox (it may not make namespaces here), so a module could read the server's secrets: " +
				"module providers are refused; run it where it may (or with --tofu-sandbox=off to trust every module's author)"}}
	}
	if c.NoMirror {
		return nil, []domain.Cause{{Field: "spec.type", Type: domain.CauseForbidden,
			Message: "this server has no provider mirror, so tofu would download and run any provider a module names: " +
				"module providers are refused; give the server --provider-mirror (or --allow-provider-downloads to trust the registries)"}}
	}
	info := &ModuleInfo{Own: map[string]bool{}, Providers: map[string]string{}}
	var found []moduleFinding
	add := func(rng hcl.Range, typ, format string, args ...any) {
		found = append(found, moduleFinding{file: rng.Filename, line: rng.Start.Line, col: rng.Start.Column, typ: typ, msg: fmt.Sprintf(format, args...)})
	}
	addDiags := func(diags hcl.Diagnostics) {
		for _, d := range diags {
			if d.Severity != hcl.DiagError {
				continue
			}
			rng := hcl.Range{}
			if d.Subject != nil {
				rng = *d.Subject
			}
			msg := d.Summary
			if d.Detail != "" {
				msg += ": " + d.Detail
			}
			add(rng, domain.CauseInvalid, "%s", msg)
		}
	}
	// The files parse independently, so on every core at once (the parse
	// is most of the check's cost); findings are then taken in file order.
	names := spec.Module.SortedFiles()
	parsed := make([]parsedFile, len(names))
	parseFiles(spec.Module, names, parsed)
	var bodies []hcl.Body
	for _, p := range parsed {
		addDiags(p.diags)
		if p.file != nil && !p.diags.HasErrors() {
			bodies = append(bodies, p.file.Body)
			if !c.AllowExec {
				for _, u := range p.provisioners {
					add(u.rng, domain.CauseForbidden, "the %s provisioner is not allowed: it runs commands on the management plane or copies files to machines (start the server with --allow-module-exec to allow it)", u.kind)
				}
			}
		}
	}
	// Where each variable and output is declared, for duplicates and for
	// causes about them.
	vars := map[string]hcl.Range{}
	outputs := map[string]hcl.Range{}
	type use struct {
		local string
		rng   hcl.Range
		what  string
	}
	var uses []use
	for _, body := range bodies {
		content, diags := body.Content(moduleFileSchema)
		addDiags(diags)
		if content == nil {
			continue
		}
		for _, blk := range content.Blocks {
			switch blk.Type {
			case "terraform":
				tc, _, diags := blk.Body.PartialContent(terraformBlockSchema)
				addDiags(diags)
				for _, b := range tc.Blocks {
					switch b.Type {
					case "backend", "cloud":
						add(b.DefRange, domain.CauseForbidden, "a %s block is not allowed: RezusCloud keeps the state (encrypted, in its own store)", b.Type)
					case "required_providers":
						c.requiredProviders(b.Body, info, add, addDiags)
					}
				}
			case "variable":
				name := blk.Labels[0]
				if prev, dup := vars[name]; dup {
					add(blk.DefRange, domain.CauseDuplicate, "variable %q is declared twice (first at %s:%d)", name, prev.Filename, prev.Start.Line)
					continue
				}
				vars[name] = blk.DefRange
				vc, _, diags := blk.Body.PartialContent(variableBlockSchema)
				addDiags(diags)
				if !slices.Contains(moduleInputs, name) {
					_, hasDefault := vc.Attributes["default"]
					info.Own[name] = hasDefault
				}
			case "output":
				name := blk.Labels[0]
				if prev, dup := outputs[name]; dup {
					add(blk.DefRange, domain.CauseDuplicate, "output %q is declared twice (first at %s:%d)", name, prev.Filename, prev.Start.Line)
					continue
				}
				outputs[name] = blk.DefRange
			case "provider":
				uses = append(uses, use{local: blk.Labels[0], rng: blk.DefRange, what: "provider block " + blk.Labels[0]})
			case "resource", "data", "ephemeral":
				rc, _, diags := blk.Body.PartialContent(resourceBlockSchema)
				addDiags(diags)
				local := impliedProvider(blk.Labels[0])
				if a, ok := rc.Attributes["provider"]; ok {
					if trav, d := hcl.AbsTraversalForExpr(a.Expr); !d.HasErrors() && len(trav) > 0 {
						local = trav.RootName()
					}
				}
				uses = append(uses, use{local: local, rng: blk.DefRange, what: fmt.Sprintf("%s %s.%s", blk.Type, blk.Labels[0], blk.Labels[1])})
			case "module":
				add(blk.DefRange, domain.CauseForbidden, "module %q: a module provider is one directory; nested module calls are not supported (their sources would be fetched at run time)", blk.Labels[0])
			}
		}
	}
	for _, u := range uses {
		if u.local == "terraform" {
			continue // built in: terraform_data, terraform_remote_state
		}
		if _, ok := info.Providers[u.local]; !ok {
			src := defaultProviderHost + "/hashicorp/" + u.local
			if c.Available != nil && !c.Available[src] {
				add(u.rng, domain.CauseNotFound, "%s uses provider %q, which is not in the module's required_providers (it would be %s, which is not in the provider mirror); declare it with its source", u.what, u.local, src)
			}
		}
	}
	for _, name := range moduleInputs {
		if _, ok := vars[name]; ok {
			info.Inputs = append(info.Inputs, name)
		}
	}
	var causes []domain.Cause
	if len(found) == 0 {
		first := hcl.Range{Filename: spec.Module.SortedFiles()[0], Start: hcl.InitialPos}
		if _, ok := vars[ModuleVarMachines]; !ok {
			add(first, domain.CauseRequired, "the module declares no variable %q: RezusCloud passes the machines to build in it (a map of name to {config, hostname})", ModuleVarMachines)
		}
		if _, ok := outputs[ModuleOutputMachines]; !ok {
			add(first, domain.CauseRequired, "the module declares no output %q: RezusCloud reads the machines it built from it (a map of name to {address, provider_id})", ModuleOutputMachines)
		}
		_, info.Endpoint = outputs[ModuleOutputEndpoint]
		causes = append(causes, c.configCauses(spec.Config, info, vars)...)
	}
	sort.SliceStable(found, func(i, j int) bool {
		a, b := found[i], found[j]
		if a.file != b.file {
			return a.file < b.file
		}
		if a.line != b.line {
			return a.line < b.line
		}
		return a.col < b.col
	})
	for _, f := range found {
		causes = append(causes, domain.Cause{Field: domain.ModuleFileField(field.NewPath("spec"), f.file), Type: f.typ, Message: fmt.Sprintf("%d:%d: %s", f.line, f.col, f.msg)})
	}
	sortCauses(causes)
	return info, causes
}

// parsedFile is one module file, parsed.
type parsedFile struct {
	file  *hcl.File
	diags hcl.Diagnostics
	// provisioners are the file's provisioner blocks (the exec guard's).
	provisioners []provisionerUse
}

// parseFiles parses the named files of m into out (same order), on up to
// GOMAXPROCS goroutines that all end before it returns.
func parseFiles(m *domain.ModuleSource, names []string, out []parsedFile) {
	workers := min(runtime.GOMAXPROCS(0), len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = parseModuleFile(names[i], []byte(m.Files[names[i]]))
			}
		}()
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
}

// parseModuleFile reads one module file the way tofu will, or says why it
// cannot: a name the guard does not judge, text nested too deeply, a syntax
// error, JSON that another reader would read differently, or a file its
// provisioners cannot be found in.
func parseModuleFile(name string, src []byte) parsedFile {
	s, diags := moduleFileSyntax(name)
	if diags.HasErrors() {
		return parsedFile{diags: diags}
	}
	f, diags := parseGuarded(src, name, s, func() (*hcl.File, hcl.Diagnostics) {
		if s == syntaxJSON {
			return hcljson.Parse(src, name)
		}
		return hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	})
	if diags.HasErrors() {
		return parsedFile{file: f, diags: diags}
	}
	if s == syntaxJSON {
		if d := strictJSON(src, name); d.HasErrors() {
			return parsedFile{file: f, diags: append(diags, d...)}
		}
	}
	uses, d := provisioners(f, src, name, s)
	return parsedFile{file: f, diags: append(diags, d...), provisioners: uses}
}

// sortCauses orders causes by field, keeping the order of one field's.
func sortCauses(causes []domain.Cause) {
	sort.SliceStable(causes, func(i, j int) bool { return causes[i].Field < causes[j].Field })
}

// requiredProviders reads terraform { required_providers { ... } }.
func (c ModuleChecker) requiredProviders(body hcl.Body, info *ModuleInfo, add func(hcl.Range, string, string, ...any), addDiags func(hcl.Diagnostics)) {
	attrs, diags := body.JustAttributes()
	addDiags(diags)
	for _, name := range sortedKeys(attrs) {
		a := attrs[name]
		v, diags := a.Expr.Value(nil)
		if diags.HasErrors() {
			add(a.Range, domain.CauseInvalid, "required_providers.%s must be a constant object {source = \"namespace/type\", version = \"...\"}", name)
			continue
		}
		source := "hashicorp/" + name
		var s cty.Value
		switch {
		case v.Type().IsObjectType() && v.Type().HasAttribute("source"):
			s = v.GetAttr("source")
		case v.Type().IsMapType() && v.IsKnown() && !v.IsNull() && v.HasIndex(cty.StringVal("source")).True():
			s = v.Index(cty.StringVal("source"))
		}
		if s != cty.NilVal {
			if !s.IsKnown() || s.IsNull() || s.Type() != cty.String {
				add(a.Range, domain.CauseInvalid, "required_providers.%s.source must be a string", name)
				continue
			}
			source = s.AsString()
		}
		addr, err := providerAddress(source)
		if err != nil {
			add(a.Range, domain.CauseInvalid, "required_providers.%s: %v", name, err)
			continue
		}
		info.Providers[name] = addr
		if c.Available != nil && !c.Available[addr] {
			add(a.Range, domain.CauseNotFound, "provider %s (required_providers.%s) is not in the provider mirror; available: %s", addr, name, strings.Join(sortedKeys(c.Available), ", "))
		}
	}
}

// providerAddress normalises a provider source to host/namespace/type.
func providerAddress(source string) (string, error) {
	parts := strings.Split(strings.ToLower(source), "/")
	switch len(parts) {
	case 2:
		parts = append([]string{defaultProviderHost}, parts...)
	case 3:
	default:
		return "", fmt.Errorf("source %q must be [host/]namespace/type", source)
	}
	for _, p := range parts {
		if p == "" {
			return "", fmt.Errorf("source %q must be [host/]namespace/type", source)
		}
	}
	return strings.Join(parts, "/"), nil
}

// impliedProvider is the local provider name a resource type implies: the
// part before the first '_'.
func impliedProvider(typ string) string {
	name, _, _ := strings.Cut(typ, "_")
	return name
}

// configCauses checks a module provider's spec.config: an object with a
// value for every own variable without a default, and for nothing else.
func (c ModuleChecker) configCauses(raw json.RawMessage, info *ModuleInfo, vars map[string]hcl.Range) []domain.Cause {
	var cfg map[string]json.RawMessage
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return []domain.Cause{{Field: "spec.config", Type: domain.CauseInvalid, Message: "must be an object of the module's own variables"}}
		}
	}
	var causes []domain.Cause
	config := field.NewPath("spec", "config")
	for _, k := range sortedKeys(cfg) {
		switch {
		case slices.Contains(moduleInputs, k):
			causes = append(causes, domain.Cause{Field: config.Child(k).String(), Type: domain.CauseForbidden, Message: fmt.Sprintf("%q is set by RezusCloud for each node group, not in spec.config", k)})
		case !hasKey(info.Own, k):
			causes = append(causes, domain.Cause{Field: config.Child(k).String(), Type: domain.CauseNotSupported, Message: fmt.Sprintf("the module declares no variable %q", k)})
		}
	}
	for _, name := range sortedKeys(info.Own) {
		if info.Own[name] {
			continue
		}
		if _, ok := cfg[name]; !ok {
			rng := vars[name]
			causes = append(causes, domain.Cause{Field: domain.ModuleFileField(field.NewPath("spec"), rng.Filename), Type: domain.CauseRequired,
				Message: fmt.Sprintf("%d:%d: variable %q has no default and RezusCloud does not set it: give it a default or a value in spec.config.%s", rng.Start.Line, rng.Start.Column, name, name)})
		}
	}
	return causes
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// MirrorProviders lists the provider addresses (host/namespace/type) in a mirror.
func MirrorProviders(mirror string) ([]string, error) {
	var out []string
	hosts, err := os.ReadDir(mirror)
	if err != nil {
		return nil, fmt.Errorf("reading provider mirror: %w", err)
	}
	for _, h := range hosts {
		if !h.IsDir() {
			continue
		}
		nss, _ := os.ReadDir(filepath.Join(mirror, h.Name()))
		for _, ns := range nss {
			if !ns.IsDir() {
				continue
			}
			types, _ := os.ReadDir(filepath.Join(mirror, h.Name(), ns.Name()))
			for _, ty := range types {
				if ty.IsDir() {
					out = append(out, h.Name()+"/"+ns.Name()+"/"+ty.Name())
				}
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
