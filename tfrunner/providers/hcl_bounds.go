package providers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/rezuscloud/rezuscloud/domain"
)

// MaxHCLNesting bounds how deeply brackets of any kind — ( [ { — may nest in
// text given to an HCL parser (module files, template strings). The parsers
// recurse once per level and a goroutine that overflows its stack kills the
// process (not a panic: nothing recovers it), so a node group's 800 KB key of
// nested parentheses crash-looped the replica leading applies (issue 27). The
// count is over the raw bytes, brackets in strings and comments included: an
// over-estimate no real module comes near.
const MaxHCLNesting = 256

// nestingDepth is the deepest bracket nesting in src, counting ( [ { alike.
func nestingDepth(src []byte) int {
	depth, deepest := 0, 0
	for _, b := range src {
		switch b {
		case '(', '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ')', ']', '}':
			depth = max(0, depth-1)
		}
	}
	return deepest
}

// jsonDepth is the deepest nesting of JSON's arrays and objects in src;
// brackets inside strings do not count (JSON's parser does not recurse on
// them, and a template inside one is bounded when it is parsed).
func jsonDepth(src []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, b := range src {
		switch {
		case inString && escaped:
			escaped = false
		case inString && b == '\\':
			escaped = true
		case inString:
			inString = b != '"'
		case b == '"':
			inString = true
		case b == '[' || b == '{':
			depth++
			deepest = max(deepest, depth)
		case b == ']' || b == '}':
			depth = max(0, depth-1)
		}
	}
	return deepest
}

// tooDeep is the diagnostic of text nested beyond MaxHCLNesting, or nil: a
// file named *.json is measured as JSON, anything else as HCL.
func tooDeep(src []byte, filename string) hcl.Diagnostics {
	measure := nestingDepth
	if strings.HasSuffix(filename, ".json") {
		measure = jsonDepth
	}
	if d := measure(src); d > MaxHCLNesting {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Nested too deeply",
			Detail:  fmt.Sprintf("brackets nest %d deep; at most %d are accepted", d, MaxHCLNesting),
			Subject: &hcl.Range{Filename: filename, Start: hcl.InitialPos, End: hcl.InitialPos}}}
	}
	return nil
}

// parseGuarded parses src with parse once its nesting is within bounds, and
// turns a panic of the parser into a diagnostic: user input never takes the
// server down through a parser.
func parseGuarded[T any](src []byte, filename string, parse func() (T, hcl.Diagnostics)) (out T, diags hcl.Diagnostics) {
	if d := tooDeep(src, filename); d != nil {
		return out, d
	}
	defer func() {
		if r := recover(); r != nil {
			diags = hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Unparseable",
				Detail:  fmt.Sprintf("the parser failed on this text: %v", r),
				Subject: &hcl.Range{Filename: filename, Start: hcl.InitialPos, End: hcl.InitialPos}}}
		}
	}()
	return parse()
}

// configKey is what a key of a node group's providerConfig may be, at any
// depth: an HCL identifier of at most 64 characters. In OpenTofu's JSON
// syntax an object's keys are templates like its values; keys are escaped
// as values are, and bounded here so that nothing a node group's editor
// writes reaches a parser unbounded.
var configKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// configKeyCauses checks every object key of raw, a JSON value, at any
// depth; each bad key is a cause at its path under field.
func configKeyCauses(raw json.RawMessage, field string) []domain.Cause {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil // the JSON's own check reports it
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil
	}
	var causes []domain.Cause
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if !configKey.MatchString(k) {
					causes = append(causes, domain.Cause{Field: path, Type: domain.CauseInvalid,
						Message: fmt.Sprintf("key %q: keys must be identifiers (a letter or _, then letters, digits, _ or -), at most 64 characters", clipKey(k))})
					continue
				}
				walk(path+"."+k, v[k])
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		}
	}
	walk(field, v)
	return causes
}

// clipKey shortens a key for a message.
func clipKey(k string) string {
	if len(k) <= 40 {
		return k
	}
	return strings.ToValidUTF8(k[:40], "") + "…"
}

// provisionerBlocks finds every provisioner in a module file, at any depth
// and under any block type (resource, removed, and whatever block tofu adds
// later): the check is on the provisioner itself, not on a list of the
// blocks known to hold one. A `removed` block's destroy-time local-exec ran
// commands on the server while exec was off (issue 27). In native syntax a
// `dynamic "provisioner"` counts too; in JSON syntax any key "provisioner".
func provisionerBlocks(f *hcl.File, src []byte, name string) []provisionerUse {
	if body, ok := f.Body.(*hclsyntax.Body); ok {
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
		return found
	}
	var v any
	if json.Unmarshal(src, &v) != nil {
		return nil // the parse reported it
	}
	var found []provisionerUse
	at := hcl.Range{Filename: name, Start: hcl.InitialPos, End: hcl.InitialPos}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "provisioner" {
					found = append(found, provisionerUse{rng: at, kind: jsonProvisionerKind(x)})
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return found
}

// provisionerUse is one provisioner block: where, and of which kind.
type provisionerUse struct {
	rng  hcl.Range
	kind string
}

// jsonProvisionerKind is the type of a provisioner in JSON syntax: the key
// of {"local-exec": {…}} or of the first such object of a list.
func jsonProvisionerKind(v any) string {
	if l, ok := v.([]any); ok && len(l) > 0 {
		v = l[0]
	}
	if m, ok := v.(map[string]any); ok {
		for k := range m {
			return k
		}
	}
	return "a"
}
