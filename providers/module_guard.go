package providers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
)

// The exec guard: unless the server runs with --allow-module-exec, no
// provisioner of a module provider may reach tofu. It fails closed: a file
// it cannot read, or reads differently from how tofu would, refuses the
// module (a 422 at write, a failed apply after), whatever the flags.
//
// It reads every file with HCL's own parsers, those tofu reads them with:
// hclsyntax for .tf, hcl's JSON parser for .tf.json. Issue 42 found a JSON
// scanner of our own (encoding/json into Go maps) that saw less than tofu:
// of two "resource" keys a map keeps the last, and a number beyond float64
// (1e400, which hcl reads as a big float) failed the decode, so the scan was
// skipped and a local-exec ran at apply with exec off.

// moduleFileSyntax is the syntax tofu reads a module file of this name in,
// or the diagnostic of a name the guard does not judge. OpenTofu reads a
// module directory's *.tf and *.tf.json files, and *.tofu and *.tofu.json
// (which replace the .tf file of the same name), overrides included
// (override.tf, *_override.tf.json, ...: merged into the blocks they name,
// and judged like any file here). The server accepts only .tf and .tf.json
// (domain's file names), so anything else that reaches the guard (a record
// written by another version) is refused rather than written where tofu
// might read it.
func moduleFileSyntax(name string) (syntax, hcl.Diagnostics) {
	refuse := func(detail string) (syntax, hcl.Diagnostics) {
		return 0, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Not a module file", Detail: detail,
			Subject: &hcl.Range{Filename: name, Start: hcl.InitialPos, End: hcl.InitialPos}}}
	}
	switch {
	case name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, "."):
		return refuse("not a file name of the module's directory (a module is one directory, and tofu skips names that start with a dot)")
	case strings.HasSuffix(name, ".tf.json"):
		return syntaxJSON, nil
	case strings.HasSuffix(name, ".tf"):
		return syntaxConfig, nil
	case strings.HasSuffix(name, ".tofu") || strings.HasSuffix(name, ".tofu.json"):
		return refuse("tofu reads it, but this server judges only .tf and .tf.json files")
	}
	return refuse("a module holds only .tf and .tf.json files")
}

// strictJSON reads src, a .tf.json file, a second time with encoding/json's
// streaming tokenizer (numbers kept as text): a text it cannot read, a
// second value after the first, or an object with a key twice at any depth
// is a diagnostic. hcl's JSON parser takes duplicate keys (two "resource"
// keys are two sets of blocks), and any reader of Go maps would see only
// one of them: so a module may have none, and both readers agree on every
// file that passes.
func strictJSON(src []byte, filename string) hcl.Diagnostics {
	at := func(offset int64) *hcl.Range {
		p := posAt(src, int(offset))
		return &hcl.Range{Filename: filename, Start: p, End: p}
	}
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	type frame struct {
		keys map[string]int64 // an object's keys and their offsets; nil in an array
		key  bool             // an object's next token is a key
	}
	var stack []*frame
	values := 0 // top-level values begun
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Unreadable JSON",
				Detail: fmt.Sprintf("the module's JSON must be read the same by every reader: %v", err), Subject: at(before)}}
		}
		if len(stack) == 0 {
			if values++; values > 1 {
				return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Extraneous data after value",
					Detail: "a JSON file holds one value", Subject: at(before)}}
			}
		}
		top := (*frame)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if k, ok := tok.(string); ok && top != nil && top.keys != nil && top.key {
			start := keyStart(src, dec.InputOffset())
			if first, dup := top.keys[k]; dup {
				fp := posAt(src, int(first))
				return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Duplicate key",
					Detail:  fmt.Sprintf("duplicate key %q (first at %d:%d): a module's JSON may set each key once", k, fp.Line, fp.Column),
					Subject: at(start)}}
			}
			top.keys[k] = start
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]int64{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				top = stack[len(stack)-1]
			} else {
				top = nil
			}
		}
		// A value ended: an object's next token is a key.
		if top != nil && top.keys != nil {
			top.key = true
		}
	}
}

// keyStart is the offset of the opening quote of the string that ends just
// before end in src.
func keyStart(src []byte, end int64) int64 {
	for j := int(end) - 2; j >= 0; j-- {
		if src[j] != '"' {
			continue
		}
		slashes := 0
		for k := j - 1; k >= 0 && src[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 {
			return int64(j)
		}
	}
	return 0
}

// posAt is the line and column of byte offset in src.
func posAt(src []byte, offset int) hcl.Pos {
	offset = min(max(offset, 0), len(src))
	line := 1 + bytes.Count(src[:offset], []byte("\n"))
	col := 1 + len([]rune(string(src[bytes.LastIndexByte(src[:offset], '\n')+1:offset])))
	return hcl.Pos{Line: line, Column: col, Byte: offset}
}

// provisionerUse is one provisioner block: where, and of which kind.
type provisionerUse struct {
	rng  hcl.Range
	kind string
}

// provisioners finds every provisioner in a module file, at any depth and
// under any block type (resource, removed, and whatever block tofu adds
// later): the check is on the provisioner itself, not on a list of the
// blocks known to hold one. A `removed` block's destroy-time local-exec ran
// commands on the server while exec was off (issue 27). In native syntax a
// `dynamic "provisioner"` counts too; in JSON syntax any key "provisioner"
// of any object, in hcl's own reading of the file (escapes decoded, every
// key of an object, arrays of objects, "//" comments included). A file it
// cannot walk is a diagnostic.
func provisioners(f *hcl.File, src []byte, name string, s syntax) ([]provisionerUse, hcl.Diagnostics) {
	if s == syntaxJSON {
		expr, diags := parseGuarded(src, name, syntaxJSON, func() (hcl.Expression, hcl.Diagnostics) { return hcljson.ParseExpression(src, name) })
		if diags.HasErrors() {
			return nil, diags
		}
		return jsonProvisioners(expr)
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Unreadable file",
			Detail: "the file was not read as native syntax", Subject: &hcl.Range{Filename: name, Start: hcl.InitialPos, End: hcl.InitialPos}}}
	}
	var found []provisionerUse
	var walk func(b *hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, blk := range b.Blocks {
			switch {
			case blk.Type == "provisioner":
				kind := "a"
				if len(blk.Labels) > 0 {
					kind = blk.Labels[0]
				}
				found = append(found, provisionerUse{rng: blk.DefRange(), kind: kind})
			case blk.Type == "dynamic" && len(blk.Labels) > 0 && blk.Labels[0] == "provisioner":
				found = append(found, provisionerUse{rng: blk.DefRange(), kind: "a dynamic"})
			}
			walk(blk.Body)
		}
	}
	walk(body)
	return found, nil
}

// jsonProvisioners walks a JSON-syntax file's value as hcl parsed it.
func jsonProvisioners(root hcl.Expression) ([]provisionerUse, hcl.Diagnostics) {
	var found []provisionerUse
	var diags hcl.Diagnostics
	var walk func(e hcl.Expression)
	walk = func(e hcl.Expression) {
		if pairs, d := hcl.ExprMap(e); !d.HasErrors() {
			for _, kv := range pairs {
				k, ok := jsonKey(kv.Key)
				if !ok {
					diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unreadable key",
						Detail: "an object key that is not a string", Subject: kv.Key.Range().Ptr()})
					continue
				}
				if k == "provisioner" {
					found = append(found, provisionerUse{rng: kv.Key.Range(), kind: jsonProvisionerKind(kv.Value)})
				}
				walk(kv.Value)
			}
			return
		}
		if items, d := hcl.ExprList(e); !d.HasErrors() {
			for _, x := range items {
				walk(x)
			}
		}
	}
	walk(root)
	return found, diags
}

// jsonKey is the text of an object key of hcl's JSON syntax (a string
// literal, read without evaluating it as a template: block types and
// labels are not templates).
func jsonKey(k hcl.Expression) (string, bool) {
	v, diags := k.Value(nil)
	if diags.HasErrors() || !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
		return "", false
	}
	return v.AsString(), true
}

// jsonProvisionerKind is the type of a provisioner in JSON syntax: the key
// of {"local-exec": {…}} or of the first such object of a list.
func jsonProvisionerKind(v hcl.Expression) string {
	if items, d := hcl.ExprList(v); !d.HasErrors() && len(items) > 0 {
		v = items[0]
	}
	if pairs, d := hcl.ExprMap(v); !d.HasErrors() && len(pairs) > 0 {
		if k, ok := jsonKey(pairs[0].Key); ok {
			return k
		}
	}
	return "a"
}
