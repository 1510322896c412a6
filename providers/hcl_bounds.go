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

// MaxHCLNesting bounds how deeply text given to an HCL parser (module
// files, templates, the generated files) may nest. hclsyntax's parser
// recurses once per level of every construct below, and so do the walks and
// evaluations of the tree it builds; a goroutine that overflows its stack
// kills the process (not a panic: nothing recovers it), so a node group's
// 800 KB key of nested parentheses crash-looped the replica leading applies
// (issue 27) and 1 MiB of `!` in a module killed the server at write time
// (issue 42). The measure (hclDepth) runs on hclsyntax's own lexer, which
// does not recurse, before any parse.
const MaxHCLNesting = 256

// syntax is how a text will be parsed, for measuring it first.
type syntax int

const (
	// syntaxConfig is a native-syntax file (.tf): hclsyntax.ParseConfig.
	syntaxConfig syntax = iota
	// syntaxTemplate is a template: hclsyntax.ParseTemplate.
	syntaxTemplate
	// syntaxJSON is a JSON-syntax file (.tf.json): hcl's JSON parser,
	// whose strings are templates.
	syntaxJSON
	// syntaxJSONValues is a JSON file of variable values (.tfvars.json),
	// whose strings are values, never parsed as templates.
	syntaxJSONValues
)

// hclDepth counts the deepest nesting of src's tokens, an upper bound on the
// depth of hclsyntax's parser. A level is one of these recursions of hclsyntax's parser
// (hcl v2.25.0, hclsyntax/parser*.go), each bounded by counting tokens:
//   - brackets: ( ) parentheses and function-call arguments, [ ] tuples,
//     for expressions and indexes, { } blocks, objects and for expressions
//     (ParseBody, parseExpressionTerm, parseTupleCons, parseObjectCons,
//     finishParsingFunctionCall, finishParsingForExpr);
//   - templates: a quoted string or heredoc inside an expression, an
//     interpolation ${ } and a directive %{ } inside those
//     (parseTemplateInner, parseTemplateParts);
//   - template directives: each %{if} or %{for} not yet ended by its
//     %{endif} or %{endfor} (templateParser.parseIf, parseFor);
//   - operators: unary ! and - (parseExpressionTerm recurses per operator),
//     the conditional's ? (parseTernaryConditional recurses into both
//     results), binary operators (parsed in a loop, but each makes a level
//     of the tree that evaluation and walks recurse through), an index or a
//     full splat [*] (each nests the rest of a traversal:
//     parseExpressionTraversals).
//
// Operators count until their expression ends at this bracket's level: at a
// comma, an equals sign (an attribute, an object item) or a => (a for
// expression's key); never at a newline, which ends an expression only in
// some contexts. The count is an over-estimate of the parser's depth, and no
// real module comes near the bound.
func hclDepth(src []byte, s syntax) int {
	lex := hclsyntax.LexConfig
	if s == syntaxTemplate {
		lex = hclsyntax.LexTemplate
	}
	toks, _ := lex(src, "", hcl.InitialPos)
	type frame struct {
		open hclsyntax.TokenType
		// ops are the operators pending in this frame's expression; dirs
		// the template directives open in this template.
		ops, dirs int
	}
	// The root is a body, or a template (TokenOQuote stands for it).
	root := hclsyntax.TokenEOF
	if s == syntaxTemplate {
		root = hclsyntax.TokenOQuote
	}
	stack := []frame{{open: root}}
	depth, deepest := 0, 0
	prev := hclsyntax.TokenNil
	for _, t := range toks {
		top := &stack[len(stack)-1]
		switch t.Type {
		case hclsyntax.TokenComment, hclsyntax.TokenNewline:
			continue
		case hclsyntax.TokenOBrack:
			if endsValue(prev) {
				top.ops++ // an index or a splat, not a tuple
				depth++
			}
			stack = append(stack, frame{open: t.Type})
			depth++
		case hclsyntax.TokenOParen, hclsyntax.TokenOBrace, hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc,
			hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
			stack = append(stack, frame{open: t.Type})
			depth++
		case hclsyntax.TokenCParen, hclsyntax.TokenCBrack, hclsyntax.TokenCBrace, hclsyntax.TokenCQuote,
			hclsyntax.TokenCHeredoc, hclsyntax.TokenTemplateSeqEnd:
			// A closer that is not this frame's is left alone: the frame
			// stays counted, an over-estimate.
			if len(stack) > 1 && closes(top.open, t.Type) {
				depth -= 1 + top.ops + top.dirs
				stack = stack[:len(stack)-1]
			}
		case hclsyntax.TokenComma, hclsyntax.TokenEqual, hclsyntax.TokenFatArrow:
			depth -= top.ops
			top.ops = 0
		case hclsyntax.TokenBang, hclsyntax.TokenMinus, hclsyntax.TokenQuestion,
			hclsyntax.TokenPlus, hclsyntax.TokenStar, hclsyntax.TokenSlash, hclsyntax.TokenPercent,
			hclsyntax.TokenEqualOp, hclsyntax.TokenNotEqual, hclsyntax.TokenLessThan, hclsyntax.TokenLessThanEq,
			hclsyntax.TokenGreaterThan, hclsyntax.TokenGreaterThanEq, hclsyntax.TokenAnd, hclsyntax.TokenOr:
			top.ops++
			depth++
		case hclsyntax.TokenIdent:
			// The keyword of a directive opens or ends a level of the
			// template that holds it.
			if prev == hclsyntax.TokenTemplateControl && len(stack) > 1 {
				tmpl := &stack[len(stack)-2]
				switch string(t.Bytes) {
				case "if", "for":
					tmpl.dirs++
					depth++
				case "endif", "endfor":
					if tmpl.dirs > 0 {
						tmpl.dirs--
						depth--
					}
				}
			}
		}
		deepest = max(deepest, depth)
		prev = t.Type
	}
	return deepest
}

// levelBound is an upper bound of hclDepth that needs no lexer: every token
// that adds a level holds one of these bytes, and a [ or a { adds at most
// two (an index and its bracket; a directive's %{ and its keyword). Most
// files and templates are far below the bound by this count alone.
func levelBound(src []byte) int {
	n := 0
	for _, b := range src {
		switch b {
		case '[', '{':
			n += 2
		case '(', '"', '<', '>', '!', '-', '?', '+', '*', '/', '%', '=', '&', '|':
			n++
		}
	}
	return n
}

// endsValue reports whether a token of type t can end an operand, so that
// a [ after it is an index (or a splat) rather than a tuple.
func endsValue(t hclsyntax.TokenType) bool {
	switch t {
	case hclsyntax.TokenIdent, hclsyntax.TokenNumberLit, hclsyntax.TokenCParen, hclsyntax.TokenCBrack,
		hclsyntax.TokenCBrace, hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc, hclsyntax.TokenStar:
		return true
	}
	return false
}

// closes reports whether a token of type c closes a frame opened by o.
func closes(o, c hclsyntax.TokenType) bool {
	switch o {
	case hclsyntax.TokenOParen:
		return c == hclsyntax.TokenCParen
	case hclsyntax.TokenOBrack:
		return c == hclsyntax.TokenCBrack
	case hclsyntax.TokenOBrace:
		return c == hclsyntax.TokenCBrace
	case hclsyntax.TokenOQuote:
		return c == hclsyntax.TokenCQuote
	case hclsyntax.TokenOHeredoc:
		return c == hclsyntax.TokenCHeredoc
	case hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
		return c == hclsyntax.TokenTemplateSeqEnd
	}
	return false
}

// jsonDepth is the deepest nesting of JSON's arrays and objects in src;
// brackets inside strings do not count (JSON's parser does not recurse on
// them; a string is measured as the template it is, by jsonTemplateDepth).
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

// jsonTemplateDepth is the deepest hclDepth of a string of src, a JSON
// text, as a template: in OpenTofu's JSON syntax every string (keys too) is
// a template that hcl parses when it is evaluated or its references are
// asked for. Only strings that may hold an interpolation or a directive
// are lexed; a string that does not decode counts as nothing here (the
// parse reports it).
func jsonTemplateDepth(src []byte) int {
	deepest := 0
	start, escaped, special := -1, false, false
	for i, b := range src {
		switch {
		case start < 0:
			if b == '"' {
				start, special = i, false
			}
		case escaped:
			escaped = false
		case b == '\\':
			escaped, special = true, true
		case b == '{':
			special = true
		case b == '"':
			if special {
				var s string
				if json.Unmarshal(src[start:i+1], &s) == nil && (strings.Contains(s, "${") || strings.Contains(s, "%{")) &&
					levelBound([]byte(s)) > deepest {
					deepest = max(deepest, hclDepth([]byte(s), syntaxTemplate))
				}
			}
			start = -1
		}
	}
	return deepest
}

// tooDeep is the diagnostic of text nested beyond MaxHCLNesting, or nil.
func tooDeep(src []byte, filename string, s syntax) hcl.Diagnostics {
	var detail string
	switch s {
	case syntaxJSONValues:
		if d := jsonDepth(src); d > MaxHCLNesting {
			detail = fmt.Sprintf("brackets nest %d deep; at most %d are accepted", d, MaxHCLNesting)
		}
	case syntaxJSON:
		if d := jsonDepth(src); d > MaxHCLNesting {
			detail = fmt.Sprintf("brackets nest %d deep; at most %d are accepted", d, MaxHCLNesting)
		} else if d := jsonTemplateDepth(src); d > MaxHCLNesting {
			detail = fmt.Sprintf("a string's template nests %d deep (brackets, templates, directives and operators); at most %d are accepted", d, MaxHCLNesting)
		}
	default:
		if levelBound(src) <= MaxHCLNesting {
			break
		}
		if d := hclDepth(src, s); d > MaxHCLNesting {
			detail = fmt.Sprintf("the text nests %d deep (brackets, templates, directives and operators); at most %d are accepted", d, MaxHCLNesting)
		}
	}
	if detail == "" {
		return nil
	}
	return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Nested too deeply", Detail: detail,
		Subject: &hcl.Range{Filename: filename, Start: hcl.InitialPos, End: hcl.InitialPos}}}
}

// parseGuarded parses src with parse once its nesting, measured as syntax
// s, is within bounds, and turns a panic of the parser into a diagnostic:
// user input never takes the server down through a parser.
func parseGuarded[T any](src []byte, filename string, s syntax, parse func() (T, hcl.Diagnostics)) (out T, diags hcl.Diagnostics) {
	if d := tooDeep(src, filename, s); d != nil {
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
