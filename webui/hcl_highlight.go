package webui

import "strings"

// A small HCL tokenizer for showing a module provider's files with syntax
// colours: comments, strings (quoted and heredocs, with their ${...} and
// %{...} templates read as code again), numbers, true/false/null and block
// keywords. It only colours: it never rejects anything, and the text of its
// spans, joined, is the input. JSON (.tf.json) goes through it too, which
// colours its strings, numbers and constants. Its output is rendered by templ,
// which escapes every span's text; nothing here produces HTML. (hcl/v2's
// hclsyntax lexer is not used: the web UI must not import the tofu engine's
// dependencies, and a lexer that stops at the first error cannot show a file
// that tofu refused.)

// Classes of the token kinds, defined in css/app.css.
const (
	hlComment  = "hl-comment"
	hlString   = "hl-string"
	hlTemplate = "hl-template"
	hlKeyword  = "hl-keyword"
	hlNumber   = "hl-number"
	hlConstant = "hl-constant"
)

// blockKeywords are the block types coloured as keywords when they open a
// line (and are not an attribute being set).
var blockKeywords = map[string]bool{
	"terraform": true, "provider": true, "variable": true, "output": true, "locals": true,
	"resource": true, "data": true, "module": true, "ephemeral": true, "moved": true,
	"import": true, "removed": true, "check": true, "required_providers": true, "backend": true,
	"lifecycle": true, "provisioner": true, "connection": true, "dynamic": true, "content": true,
	"validation": true, "precondition": true, "postcondition": true,
}

// codeSpan is a run of text in one colour ("" for none).
type codeSpan struct {
	Class, Text string
}

// highlightHCL splits src into lines of coloured spans: line i of the result
// is line i+1 of the file. Carriage returns are dropped (a browser would
// read one as a line break; tofu counts lines by \n).
func highlightHCL(src string) [][]codeSpan {
	src = strings.ReplaceAll(src, "\r", "")
	lx := hclLexer{src: src}
	lx.run()
	return splitLines(src, lx.spans)
}

// lexSpan is a run of the source in one colour, by offsets.
type lexSpan struct {
	class      string
	start, end int
}

// lexFrame is what the lexer is inside of.
type lexFrame struct {
	kind int
	// depth counts the braces open in a template's code.
	depth int
	// marker ends a heredoc.
	marker string
}

const (
	inString = iota
	inHeredoc
	inTemplate
)

type hclLexer struct {
	src   string
	pos   int
	stack []lexFrame
	spans []lexSpan
}

func (lx *hclLexer) emit(class string, end int) {
	if end <= lx.pos {
		return
	}
	lx.spans = append(lx.spans, lexSpan{class: class, start: lx.pos, end: end})
	lx.pos = end
}

func (lx *hclLexer) top() *lexFrame {
	if len(lx.stack) == 0 {
		return nil
	}
	return &lx.stack[len(lx.stack)-1]
}

func (lx *hclLexer) pop() { lx.stack = lx.stack[:len(lx.stack)-1] }

func (lx *hclLexer) run() {
	for lx.pos < len(lx.src) {
		f := lx.top()
		switch {
		case f != nil && f.kind == inString:
			lx.stringPart(false)
		case f != nil && f.kind == inHeredoc:
			lx.heredocPart(f)
		default:
			lx.code(f)
		}
	}
}

// rest is the source from the lexer's position on.
func (lx *hclLexer) rest() string { return lx.src[lx.pos:] }

// code reads one token of expressions and structure, at the top level or in
// a template (f).
func (lx *hclLexer) code(f *lexFrame) {
	rest := lx.rest()
	c := rest[0]
	switch {
	case c == '#' || strings.HasPrefix(rest, "//"):
		lx.emit(hlComment, lx.pos+lineLen(rest))
	case strings.HasPrefix(rest, "/*"):
		end := strings.Index(rest[2:], "*/")
		if end < 0 {
			lx.emit(hlComment, len(lx.src))
			return
		}
		lx.emit(hlComment, lx.pos+2+end+2)
	case c == '"':
		lx.emit(hlString, lx.pos+1)
		lx.stack = append(lx.stack, lexFrame{kind: inString})
	case strings.HasPrefix(rest, "<<"):
		if marker, n := heredocOpener(rest); n > 0 {
			lx.emit(hlString, lx.pos+n)
			lx.stack = append(lx.stack, lexFrame{kind: inHeredoc, marker: marker})
			return
		}
		lx.emit("", lx.pos+2)
	case isDigit(c):
		lx.emit(hlNumber, lx.pos+numberLen(rest))
	case isIdentStart(c):
		n := identLen(rest)
		word := rest[:n]
		class := ""
		switch {
		case word == "true" || word == "false" || word == "null":
			class = hlConstant
		case blockKeywords[word] && lx.atLineStart() && !setsAttribute(rest[n:]):
			class = hlKeyword
		}
		lx.emit(class, lx.pos+n)
	case c == '{' && f != nil:
		f.depth++
		lx.emit("", lx.pos+1)
	case c == '}' && f != nil:
		if f.depth == 0 {
			lx.emit(hlTemplate, lx.pos+1)
			lx.pop()
			return
		}
		f.depth--
		lx.emit("", lx.pos+1)
	default:
		// Blanks, operators and punctuation, up to what may start a token.
		n := 1
		for n < len(rest) && !strings.ContainsRune("#/\"<{}_", rune(rest[n])) && !isDigit(rest[n]) && !isIdentStart(rest[n]) {
			n++
		}
		lx.emit("", lx.pos+n)
	}
}

// stringPart reads a quoted string's text up to its end, a template, or the
// end of the line (a quoted string cannot span lines: the file is broken,
// and the rest of the line is read as code again).
func (lx *hclLexer) stringPart(heredoc bool) {
	rest := lx.rest()
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '\\' && !heredoc:
			i++
		case c == '"' && !heredoc:
			lx.emit(hlString, lx.pos+i+1)
			lx.pop()
			return
		case c == '\n':
			lx.emit(hlString, lx.pos+i)
			if !heredoc {
				lx.pop()
			}
			return
		case (c == '$' || c == '%') && strings.HasPrefix(rest[i+1:], "{"):
			if i > 0 && rest[i-1] == c { // $${ and %%{ are literal
				continue
			}
			lx.emit(hlString, lx.pos+i)
			lx.emit(hlTemplate, lx.pos+2)
			lx.stack = append(lx.stack, lexFrame{kind: inTemplate})
			return
		}
	}
	lx.emit(hlString, len(lx.src))
}

// heredocPart reads one line of a heredoc, or its closing marker.
func (lx *hclLexer) heredocPart(f *lexFrame) {
	if lx.pos > 0 && lx.src[lx.pos-1] == '\n' {
		line := lx.rest()[:lineLen(lx.rest())]
		if strings.TrimSpace(line) == f.marker {
			lx.emit(hlString, lx.pos+len(line))
			lx.pop()
			return
		}
	}
	if lx.src[lx.pos] == '\n' {
		lx.emit("", lx.pos+1)
		return
	}
	lx.stringPart(true)
}

// heredocOpener reads <<EOT or <<-EOT up to the end of its line: the
// marker, and the opener's length (0 when rest is no heredoc).
func heredocOpener(rest string) (string, int) {
	i := 2
	if strings.HasPrefix(rest[i:], "-") {
		i++
	}
	n := identLen(rest[i:])
	if n == 0 || !isIdentStart(rest[i]) {
		return "", 0
	}
	if j := i + n; j == len(rest) || rest[j] == '\n' {
		return rest[i:j], j
	}
	return "", 0
}

// atLineStart reports whether only blanks come before the lexer's position
// on its line.
func (lx *hclLexer) atLineStart() bool {
	for i := lx.pos - 1; i >= 0; i-- {
		switch lx.src[i] {
		case '\n':
			return true
		case ' ', '\t':
		default:
			return false
		}
	}
	return true
}

// setsAttribute reports whether what follows a word makes it an attribute
// name (data = ...) rather than a block type (data "x" "y" {).
func setsAttribute(after string) bool {
	t := strings.TrimLeft(after, " \t")
	return strings.HasPrefix(t, "=") && !strings.HasPrefix(t, "==")
}

func lineLen(s string) int {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return i
	}
	return len(s)
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func identLen(s string) int {
	i := 0
	for i < len(s) && (isIdentStart(s[i]) || isDigit(s[i]) || s[i] == '-') {
		i++
	}
	return i
}

// numberLen reads 12, 1.5 or 2e10.
func numberLen(s string) int {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i+1 < len(s) && s[i] == '.' && isDigit(s[i+1]) {
		i++
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && isDigit(s[j]) {
			for i = j; i < len(s) && isDigit(s[i]); i++ {
			}
		}
	}
	return i
}

// splitLines cuts spans at line ends, joining neighbours of one colour. A
// file ending in a newline has no empty last line.
func splitLines(src string, spans []lexSpan) [][]codeSpan {
	var (
		lines [][]codeSpan
		line  []lexSpan
	)
	flush := func() {
		out := make([]codeSpan, len(line))
		for i, s := range line {
			out[i] = codeSpan{Class: s.class, Text: src[s.start:s.end]}
		}
		if len(line) == 0 {
			out = nil
		}
		lines = append(lines, out)
		line = line[:0]
	}
	add := func(class string, start, end int) {
		if start == end {
			return
		}
		if n := len(line); n > 0 && line[n-1].class == class && line[n-1].end == start {
			line[n-1].end = end
			return
		}
		line = append(line, lexSpan{class: class, start: start, end: end})
	}
	for _, s := range spans {
		start := s.start
		for {
			nl := strings.IndexByte(src[start:s.end], '\n')
			if nl < 0 {
				add(s.class, start, s.end)
				break
			}
			add(s.class, start, start+nl)
			flush()
			start += nl + 1
		}
	}
	if len(line) > 0 || !strings.HasSuffix(src, "\n") {
		flush()
	}
	return lines
}
