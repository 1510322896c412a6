package providers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
)

// checkGenerated checks the generated files the way tofu will read them, so a
// generator bug fails the apply with a clear message before tofu runs: both
// parse with hcl's JSON parser; the root has only known blocks; every provider
// is required and aliased once; every resource and data source names a
// declared provider alias of its own type; every variable is sensitive and has
// a map-of-strings value in the vars file (and the vars file nothing else);
// every string parses as a template whose references are declared, whose
// functions are known, and which uses each.* only where for_each is set.
func checkGenerated(main, vars []byte) error {
	file, diags := parseGuarded(main, MainFileName, syntaxJSON, func() (*hcl.File, hcl.Diagnostics) { return hcljson.Parse(main, MainFileName) })
	if diags.HasErrors() {
		return fmt.Errorf("%s: %s", MainFileName, diags.Error())
	}
	content, diags := file.Body.Content(tfRootSchema)
	if diags.HasErrors() {
		return fmt.Errorf("%s: %s", MainFileName, diags.Error())
	}
	c := &tfChecker{
		required:  map[string]bool{},
		providers: map[string]bool{},
		variables: map[string]bool{},
		declared:  map[string]bool{},
		modules:   map[string]bool{},
	}
	// In dependency order: what is required, then what is configured and
	// declared, then what uses it.
	for _, pass := range [][]string{{"terraform"}, {"provider", "variable", "output"}, {"resource", "data", "module", "moved"}} {
		for _, blk := range content.Blocks {
			if !slices.Contains(pass, blk.Type) {
				continue
			}
			if err := c.block(blk); err != nil {
				return fmt.Errorf("%s: %s %s: %w", MainFileName, blk.Type, strings.Join(blk.Labels, "."), err)
			}
		}
	}
	if err := c.references(main); err != nil {
		return fmt.Errorf("%s: %w", MainFileName, err)
	}
	if err := c.vars(vars); err != nil {
		return fmt.Errorf("%s: %w", VarsFileName, err)
	}
	return nil
}

var tfRootSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
	{Type: "terraform"},
	{Type: "provider", LabelNames: []string{"type"}},
	{Type: "variable", LabelNames: []string{"name"}},
	{Type: "resource", LabelNames: []string{"type", "name"}},
	{Type: "data", LabelNames: []string{"type", "name"}},
	{Type: "output", LabelNames: []string{"name"}},
	{Type: "module", LabelNames: []string{"name"}},
	{Type: "moved"},
}}

// tfFunctions are the functions the generators use.
var tfFunctions = map[string]bool{"replace": true, "base64encode": true, "strcontains": true}

type tfChecker struct {
	required  map[string]bool // provider local names in required_providers
	providers map[string]bool // "<local name>.<alias>"
	variables map[string]bool
	// declared holds "<type>.<name>" of resources and "data.<type>.<name>".
	declared map[string]bool
	// modules holds the names of module calls.
	modules map[string]bool
}

func (c *tfChecker) block(blk *hcl.Block) error {
	switch blk.Type {
	case "terraform":
		tc, diags := blk.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "required_providers"}}})
		if diags.HasErrors() {
			return diags
		}
		for _, rp := range tc.Blocks {
			attrs, diags := rp.Body.JustAttributes()
			if diags.HasErrors() {
				return diags
			}
			for name, attr := range attrs {
				v, diags := attr.Expr.Value(nil)
				if diags.HasErrors() {
					return diags
				}
				if !v.Type().IsObjectType() || !v.Type().HasAttribute("source") || !v.Type().HasAttribute("version") {
					return fmt.Errorf("required provider %s needs a source and a version", name)
				}
				c.required[name] = true
			}
		}
	case "provider":
		local := blk.Labels[0]
		if !c.required[local] {
			return fmt.Errorf("provider %q is not in required_providers", local)
		}
		attrs, diags := blk.Body.JustAttributes()
		if diags.HasErrors() {
			return diags
		}
		alias, ok := attrs["alias"]
		if !ok {
			return fmt.Errorf("a provider block without an alias")
		}
		v, diags := alias.Expr.Value(nil)
		if diags.HasErrors() || v.Type() != cty.String || !hclsyntax.ValidIdentifier(v.AsString()) {
			return fmt.Errorf("the alias must be an identifier")
		}
		ref := local + "." + v.AsString()
		if c.providers[ref] {
			return fmt.Errorf("provider %s configured twice", ref)
		}
		c.providers[ref] = true
	case "variable":
		attrs, diags := blk.Body.JustAttributes()
		if diags.HasErrors() {
			return diags
		}
		s, ok := attrs["sensitive"]
		if !ok {
			return fmt.Errorf("variables carry machine configs and must be sensitive")
		}
		if v, diags := s.Expr.Value(nil); diags.HasErrors() || !v.RawEquals(cty.True) {
			return fmt.Errorf("variables carry machine configs and must be sensitive")
		}
		c.variables[blk.Labels[0]] = true
	case "output":
		attrs, diags := blk.Body.JustAttributes()
		if diags.HasErrors() {
			return diags
		}
		if _, ok := attrs["value"]; !ok {
			return fmt.Errorf("an output without a value")
		}
	case "module":
		attrs, diags := blk.Body.JustAttributes()
		if diags.HasErrors() {
			return diags
		}
		src, ok := attrs["source"]
		if !ok {
			return fmt.Errorf("a module call without a source")
		}
		v, diags := src.Expr.Value(nil)
		if diags.HasErrors() || v.Type() != cty.String || !strings.HasPrefix(v.AsString(), "./"+ModulesDir+"/") {
			return fmt.Errorf("the source must be a directory under ./%s/", ModulesDir)
		}
		c.modules[blk.Labels[0]] = true
	case "moved":
		attrs, diags := blk.Body.JustAttributes()
		if diags.HasErrors() {
			return diags
		}
		for _, k := range []string{"from", "to"} {
			a, ok := attrs[k]
			if !ok {
				return fmt.Errorf("a moved block without %s", k)
			}
			if _, diags := hcl.AbsTraversalForExpr(a.Expr); diags.HasErrors() {
				return fmt.Errorf("moved.%s: %s", k, diags.Error())
			}
		}
	case "resource", "data":
		rc, _, diags := blk.Body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "provider", Required: true}}})
		if diags.HasErrors() {
			return diags
		}
		trav, diags := hcl.AbsTraversalForExpr(rc.Attributes["provider"].Expr)
		if diags.HasErrors() || len(trav) != 2 {
			return fmt.Errorf("provider must be <name>.<alias>")
		}
		local := trav.RootName()
		alias, _ := trav[1].(hcl.TraverseAttr)
		ref := local + "." + alias.Name
		if !c.providers[ref] {
			return fmt.Errorf("provider %s is not configured", ref)
		}
		if !strings.HasPrefix(blk.Labels[0], local+"_") {
			return fmt.Errorf("type %s does not belong to provider %s", blk.Labels[0], ref)
		}
		key := blk.Labels[0] + "." + blk.Labels[1]
		if blk.Type == "data" {
			key = "data." + key
		}
		c.declared[key] = true
	}
	return nil
}

// references walks every string of main (a template in JSON syntax), block
// by block, checking its syntax, functions and references.
func (c *tfChecker) references(main []byte) error {
	var root map[string]any
	dec := json.NewDecoder(bytes.NewReader(main))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return err
	}
	for _, kind := range []string{"resource", "data"} {
		types, _ := root[kind].(map[string]any)
		for _, typ := range sortedKeys(types) {
			byName, _ := types[typ].(map[string]any)
			for _, name := range sortedKeys(byName) {
				body, _ := byName[name].(map[string]any)
				_, forEach := body["for_each"]
				if err := c.walk(body, forEach); err != nil {
					return fmt.Errorf("%s %s.%s: %w", kind, typ, name, err)
				}
			}
		}
	}
	modules, _ := root["module"].(map[string]any)
	for _, name := range sortedKeys(modules) {
		body, _ := modules[name].(map[string]any)
		if err := c.walk(body, false); err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
	}
	outputs, _ := root["output"].(map[string]any)
	for _, name := range sortedKeys(outputs) {
		if err := c.walk(outputs[name], false); err != nil {
			return fmt.Errorf("output %s: %w", name, err)
		}
	}
	return nil
}

func (c *tfChecker) walk(v any, forEach bool) error {
	switch v := v.(type) {
	case string:
		return c.template(v, forEach)
	case []any:
		for _, x := range v {
			if err := c.walk(x, forEach); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			if err := c.template(k, forEach); err != nil {
				return err
			}
			if err := c.walk(v[k], forEach); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *tfChecker) template(s string, forEach bool) error {
	if !strings.Contains(s, "{") {
		return nil
	}
	expr, diags := parseGuarded([]byte(s), "", syntaxTemplate, func() (hclsyntax.Expression, hcl.Diagnostics) {
		return hclsyntax.ParseTemplate([]byte(s), "", hcl.InitialPos)
	})
	if diags.HasErrors() {
		return fmt.Errorf("%q: %s", s, diags.Error())
	}
	var bad []string
	hclsyntax.VisitAll(expr, func(n hclsyntax.Node) hcl.Diagnostics {
		if call, ok := n.(*hclsyntax.FunctionCallExpr); ok && !tfFunctions[call.Name] {
			bad = append(bad, "unknown function "+call.Name)
		}
		return nil
	})
	for _, t := range expr.Variables() {
		if err := c.reference(t, forEach); err != nil {
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%q: %s", s, strings.Join(bad, "; "))
	}
	return nil
}

func (c *tfChecker) reference(t hcl.Traversal, forEach bool) error {
	attr := func(i int) string {
		if i < len(t) {
			if a, ok := t[i].(hcl.TraverseAttr); ok {
				return a.Name
			}
		}
		return ""
	}
	switch root := t.RootName(); root {
	case "var":
		if !c.variables[attr(1)] {
			return fmt.Errorf("undeclared variable %q", attr(1))
		}
	case "each":
		if !forEach {
			return fmt.Errorf("each.%s outside a for_each", attr(1))
		}
	case "module":
		if !c.modules[attr(1)] {
			return fmt.Errorf("undeclared module %s", attr(1))
		}
	case "data":
		if !c.declared["data."+attr(1)+"."+attr(2)] {
			return fmt.Errorf("undeclared data source data.%s.%s", attr(1), attr(2))
		}
	default:
		if !c.declared[root+"."+attr(1)] {
			return fmt.Errorf("undeclared resource %s.%s", root, attr(1))
		}
	}
	return nil
}

// vars checks the vars file: only declared variables, each with a value that
// is an object of strings, and every declared variable given.
func (c *tfChecker) vars(vars []byte) error {
	file, diags := parseGuarded(vars, VarsFileName, syntaxJSONValues, func() (*hcl.File, hcl.Diagnostics) { return hcljson.Parse(vars, VarsFileName) })
	if diags.HasErrors() {
		return diags
	}
	attrs, diags := file.Body.JustAttributes()
	if diags.HasErrors() {
		return diags
	}
	for name, attr := range attrs {
		if !c.variables[name] {
			return fmt.Errorf("a value for undeclared variable %q", name)
		}
		v, diags := attr.Expr.Value(nil)
		if diags.HasErrors() {
			return diags
		}
		if !v.Type().IsObjectType() && !v.Type().IsMapType() {
			return fmt.Errorf("variable %s: want an object of strings, got %s", name, v.Type().FriendlyName())
		}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			if e.Type() != cty.String {
				return fmt.Errorf("variable %s[%q]: want a string, got %s", name, k.AsString(), e.Type().FriendlyName())
			}
		}
	}
	for name := range c.variables {
		if _, ok := attrs[name]; !ok {
			return fmt.Errorf("no value for variable %q", name)
		}
	}
	return nil
}
