package providers

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
)

// FuzzModuleGuard: whatever a module file holds, in either syntax, either
// the module checker refuses the module, or tofu would find no provisioner
// in it (issue 42, finding 2: the guard's own reading of JSON saw less than
// tofu's). What tofu finds is judged independently of the guard: hcl's
// schema decoding of the file, the way OpenTofu's configuration loader
// decodes it (its file schema, then each block that may hold a provisioner
// decoded with one), not the guard's walk. Native-syntax files also check
// the nesting measure: a tree hcl builds is never much deeper than
// hclDepth said (finding 6; a deeper one means a construct the measure
// misses), and never deeper than levelBound, which spares most texts the
// lexer. The seeds are the known bypasses and the provisioner cases.
//
//	go test -run XXX -fuzz FuzzModuleGuard -fuzztime 3m ./providers/
func FuzzModuleGuard(f *testing.F) {
	for _, tc := range guardBypasses {
		if strings.HasSuffix(tc.file, ".tf.json") || strings.HasSuffix(tc.file, ".tf") {
			f.Add(strings.HasSuffix(tc.file, ".json"), tc.text)
		}
	}
	for _, files := range provisionerPlaces {
		for name, text := range files {
			f.Add(strings.HasSuffix(name, ".json"), text)
		}
	}
	builtin, _ := BuiltinModule("emulated")
	for name, text := range builtin.Files {
		f.Add(strings.HasSuffix(name, ".json"), text)
	}
	f.Add(false, "locals {\n  x = !!!-1 ? [for x in a[*].b : x] : \"${a}%{if b}c%{endif}\"\n}\n")
	f.Add(true, `{"resource":{"terraform_data":{"x":{"//":{"provisioner":{}},"lifecycle":{}}}}}`)
	f.Add(true, `{"check":{"c":{"data":{"terraform_data":{"x":{"provisioner":{"local-exec":{"command":"id"}}}}}}}}`)
	mirror := map[string]bool{"registry.opentofu.org/rezuscloud/emulated": true}
	f.Fuzz(func(t *testing.T, isJSON bool, text string) {
		if len(text) > 64<<10 {
			return // the judge parses unguarded
		}
		name := "fuzz.tf"
		if isJSON {
			name = "fuzz.tf.json"
		}
		_, causes := ModuleChecker{Available: mirror}.Check(emulatedModuleSpec(map[string]string{name: text}))
		if seen := tofuProvisioners(name, []byte(text)); len(seen) > 0 && len(causes) == 0 {
			t.Fatalf("the guard let through a module in which tofu finds provisioners at %v:\n%s", seen, text)
		}
		if !isJSON {
			measured := hclDepth([]byte(text), syntaxConfig)
			if d := astDepth([]byte(text)); d > 2*measured+8 {
				t.Fatalf("hcl built a tree %d deep of a text measured %d deep:\n%s", d, measured, text)
			}
			for _, s := range []syntax{syntaxConfig, syntaxTemplate} {
				if d, b := hclDepth([]byte(text), s), levelBound([]byte(text)); d > b {
					t.Fatalf("measured %d deep (syntax %d), above the bound %d that skips the lexer:\n%s", d, s, b, text)
				}
			}
		}
	})
}

// tofuFileSchema is OpenTofu's schema of a configuration file's top level
// (internal/configs/parser_config.go), as far as it matters here.
var tofuFileSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
	{Type: "terraform"}, {Type: "required_providers"}, {Type: "locals"}, {Type: "moved"}, {Type: "import"}, {Type: "removed"},
	{Type: "provider", LabelNames: []string{"name"}}, {Type: "variable", LabelNames: []string{"name"}},
	{Type: "output", LabelNames: []string{"name"}}, {Type: "module", LabelNames: []string{"name"}},
	{Type: "check", LabelNames: []string{"name"}},
	{Type: "resource", LabelNames: []string{"type", "name"}}, {Type: "data", LabelNames: []string{"type", "name"}},
	{Type: "ephemeral", LabelNames: []string{"type", "name"}},
}}

// provisionerSchema is the part of a resource's (or a removed block's)
// schema that holds provisioners.
var provisionerSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
	{Type: "provisioner", LabelNames: []string{"type"}},
	{Type: "data", LabelNames: []string{"type", "name"}}, // a check block's scoped data source
}}

// tofuProvisioners are the provisioner blocks hcl's schema decoding finds
// in a file, the way tofu's loader decodes it; nil when hcl cannot parse it
// (tofu then refuses the configuration and runs nothing).
func tofuProvisioners(name string, src []byte) []hcl.Range {
	var f *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(name, ".json") {
		f, diags = hcljson.Parse(src, name)
	} else {
		f, diags = hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	}
	if diags.HasErrors() || f == nil {
		return nil
	}
	content, _, _ := f.Body.PartialContent(tofuFileSchema)
	var found []hcl.Range
	var inBlock func(b *hcl.Block)
	inBlock = func(b *hcl.Block) {
		c, _, _ := b.Body.PartialContent(provisionerSchema)
		for _, p := range c.Blocks {
			if p.Type == "provisioner" {
				found = append(found, p.DefRange)
			} else if b.Type == "check" {
				inBlock(p)
			}
		}
	}
	for _, b := range content.Blocks {
		switch b.Type {
		case "resource", "data", "ephemeral", "removed", "check":
			inBlock(b)
		}
	}
	return found
}

// astDepth is the depth of the tree hclsyntax builds of src.
func astDepth(src []byte) int {
	f, _ := hclsyntax.ParseConfig(src, "", hcl.InitialPos)
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return 0
	}
	w := &depthWalker{}
	hclsyntax.Walk(body, w)
	return w.deepest
}

type depthWalker struct{ depth, deepest int }

func (w *depthWalker) Enter(hclsyntax.Node) hcl.Diagnostics {
	w.depth++
	w.deepest = max(w.deepest, w.depth)
	return nil
}

func (w *depthWalker) Exit(hclsyntax.Node) hcl.Diagnostics {
	w.depth--
	return nil
}
