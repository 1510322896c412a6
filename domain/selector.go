package domain

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Selector is a parsed Kubernetes label selector: all of its requirements
// must hold for an object to match. The zero value has no requirements and
// therefore matches everything, like an empty labelSelector query parameter.
// The requirements are apimachinery's, so matching is Kubernetes' own; the
// parser is ours, for error messages that say where the selector is wrong.
type Selector struct {
	reqs []labels.Requirement
}

// ParseSelector parses the Kubernetes label selector syntax as
// k8s.io/apimachinery/pkg/labels.Parse does, so that what works with kubectl
// -l works here: "a=b", "a==b", "a!=b", "a in (x,y)", "a notin (x,y)", "a",
// "!a", and for integer values "a>1" and "a<1", joined by commas (AND), with
// blanks allowed between tokens. An empty or blank string selects everything.
//
// Values may be empty ("a=", "a in (x,)"). Unlike Kubernetes, which reads
// "a in ()" as "a in (,)", a set holding only the empty value, an empty set is
// rejected: it is almost certainly a mistake, and "a in (,)" still says
// "empty value" for whoever means it.
//
// A syntax error, or a key or value that is not a valid label key or value,
// yields an *Error with Reason BadRequest whose message says what is wrong and
// at which byte offset, with one Cause for the field "labelSelector".
func ParseSelector(s string) (Selector, error) {
	p := selectorParser{src: s, toks: lexSelector(s)}
	reqs, err := p.parse()
	if err != nil {
		return Selector{}, err
	}
	slices.SortStableFunc(reqs, func(a, b labels.Requirement) int {
		return cmp.Or(strings.Compare(a.Key(), b.Key()), strings.Compare(a.String(), b.String()))
	})
	return Selector{reqs: reqs}, nil
}

// Matches reports whether labels satisfy every requirement of the selector.
// A nil map is an object without labels.
func (s Selector) Matches(m map[string]string) bool { return s.matches(labels.Set(m)) }

// MatchesPairs is Matches for labels kept as LabelPairs.
func (s Selector) MatchesPairs(p LabelPairs) bool {
	// The empty selector answers without p: handing p over as labels.Labels
	// puts a copy of it on the heap, once per object listed.
	return len(s.reqs) == 0 || s.matches(p)
}

func (s Selector) matches(ls labels.Labels) bool {
	// By index: Matches has a pointer receiver, and taking the address of a
	// range copy moved each requirement to the heap, once per object listed.
	for i := range s.reqs {
		if !s.reqs[i].Matches(ls) {
			return false
		}
	}
	return true
}

// Empty reports whether the selector has no requirements, so that callers can
// skip filtering altogether.
func (s Selector) Empty() bool { return len(s.reqs) == 0 }

// String gives the canonical form of the selector: requirements sorted by key,
// "==" written as "=", a set of one value written as "=" or "!=", set values
// sorted and deduplicated, no blanks except around "in" and "notin". Parsing
// it again yields the same selector, so it can serve as a cache or watch key.
func (s Selector) String() string {
	parts := make([]string, len(s.reqs))
	for i, r := range s.reqs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// selTokKind is the kind of a selector token.
type selTokKind int

const (
	selTokEnd selTokKind = iota
	selTokIdent
	selTokOpenPar
	selTokClosePar
	selTokComma
	selTokNot
	selTokEquals
	selTokDoubleEquals
	selTokNotEquals
	selTokGreaterThan
	selTokLessThan
	selTokIn
	selTokNotIn
)

// selToken is a token with the byte offset it starts at, for error messages.
type selToken struct {
	kind selTokKind
	lit  string
	pos  int
}

// describe names the token the way an error message should quote it.
func (t selToken) describe() string {
	if t.kind == selTokEnd {
		return "end of string"
	}
	return "'" + t.lit + "'"
}

func isSelectorBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func isSelectorSymbol(c byte) bool {
	switch c {
	case '=', '!', '(', ')', ',', '>', '<':
		return true
	}
	return false
}

// lexSelector splits a selector as the Kubernetes lexer does: identifiers run
// until a blank or one of =!(),<>, and "!=" and "==" are read greedily. "in"
// and "notin" are keywords only where an operator is expected; the parser
// turns them back into identifiers elsewhere.
func lexSelector(s string) []selToken {
	var toks []selToken
	i := 0
	for {
		for i < len(s) && isSelectorBlank(s[i]) {
			i++
		}
		if i == len(s) {
			return append(toks, selToken{kind: selTokEnd, pos: i})
		}
		start := i
		c := s[i]
		if isSelectorSymbol(c) {
			i++
			var kind selTokKind
			switch {
			case c == '=' && i < len(s) && s[i] == '=':
				kind, i = selTokDoubleEquals, i+1
			case c == '!' && i < len(s) && s[i] == '=':
				kind, i = selTokNotEquals, i+1
			case c == '=':
				kind = selTokEquals
			case c == '!':
				kind = selTokNot
			case c == '(':
				kind = selTokOpenPar
			case c == ')':
				kind = selTokClosePar
			case c == ',':
				kind = selTokComma
			case c == '>':
				kind = selTokGreaterThan
			default:
				kind = selTokLessThan
			}
			toks = append(toks, selToken{kind: kind, lit: s[start:i], pos: start})
			continue
		}
		for i < len(s) && !isSelectorBlank(s[i]) && !isSelectorSymbol(s[i]) {
			i++
		}
		kind := selTokIdent
		switch s[start:i] {
		case "in":
			kind = selTokIn
		case "notin":
			kind = selTokNotIn
		}
		toks = append(toks, selToken{kind: kind, lit: s[start:i], pos: start})
	}
}

// selectorParser is a recursive-descent parser over the tokens, mirroring the
// Kubernetes one so that the same strings are accepted.
type selectorParser struct {
	src  string
	toks []selToken
	i    int
}

// peek returns the next token; with asValue, the keywords "in" and "notin"
// read as identifiers, which is how Kubernetes lets them be keys and values.
func (p *selectorParser) peek(asValue bool) selToken {
	t := p.toks[p.i]
	if asValue && (t.kind == selTokIn || t.kind == selTokNotIn) {
		t.kind = selTokIdent
	}
	return t
}

func (p *selectorParser) next(asValue bool) selToken {
	t := p.peek(asValue)
	if t.kind != selTokEnd {
		p.i++
	}
	return t
}

// fail builds the BadRequest error for a problem found at byte offset pos.
func (p *selectorParser) fail(pos int, format string, args ...any) error {
	detail := fmt.Sprintf("at byte offset %d: ", pos) + fmt.Sprintf(format, args...)
	return NewBadRequest(fmt.Sprintf("invalid label selector %q: %s", p.src, detail),
		Cause{Field: "labelSelector", Type: CauseInvalid, Message: detail})
}

func (p *selectorParser) parse() ([]labels.Requirement, error) {
	var reqs []labels.Requirement
	for {
		t := p.peek(true)
		switch t.kind {
		case selTokEnd:
			return reqs, nil
		case selTokIdent, selTokNot:
		default:
			return nil, p.fail(t.pos, "found %s, expected: '!', a key or end of string", t.describe())
		}
		r, err := p.parseRequirement()
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
		t = p.next(true)
		switch t.kind {
		case selTokEnd:
			return reqs, nil
		case selTokComma:
			if n := p.peek(true); n.kind != selTokIdent && n.kind != selTokNot {
				return nil, p.fail(n.pos, "found %s, expected: '!' or a key after ','", n.describe())
			}
		default:
			return nil, p.fail(t.pos, "found %s, expected: ',' or end of string", t.describe())
		}
	}
}

// selectorOps maps operator tokens to apimachinery's operators; "==" is
// written "=", so that String is canonical.
var selectorOps = map[selTokKind]selection.Operator{
	selTokEquals: selection.Equals, selTokDoubleEquals: selection.Equals, selTokNotEquals: selection.NotEquals,
	selTokGreaterThan: selection.GreaterThan, selTokLessThan: selection.LessThan,
	selTokIn: selection.In, selTokNotIn: selection.NotIn,
}

func (p *selectorParser) parseRequirement() (labels.Requirement, error) {
	negated := false
	t := p.next(true)
	if t.kind == selTokNot {
		negated = true
		t = p.next(true)
	}
	if t.kind != selTokIdent {
		return labels.Requirement{}, p.fail(t.pos, "found %s, expected: a key", t.describe())
	}
	if probs := labelKeyProblems(t.lit); len(probs) > 0 {
		return labels.Requirement{}, p.fail(t.pos, "%s", labelMessage(fmt.Sprintf("key %q", t.lit), probs))
	}
	var op selection.Operator
	var values []string
	switch n := p.peek(true); {
	case negated:
		// Whatever follows must be ',' or the end; parse checks that.
		op = selection.DoesNotExist
	case n.kind == selTokEnd || n.kind == selTokComma:
		op = selection.Exists
	default:
		opTok := p.next(false)
		var ok bool
		if op, ok = selectorOps[opTok.kind]; !ok {
			return labels.Requirement{}, p.fail(opTok.pos, "found %s, expected: one of '=', '==', '!=', 'in', 'notin', '>', '<', ',' or end of string", opTok.describe())
		}
		var err error
		if op == selection.In || op == selection.NotIn {
			values, err = p.parseSet()
		} else {
			values, err = p.parseExactValue(op)
		}
		if err != nil {
			return labels.Requirement{}, err
		}
		// A set of one is an equality; writing it so keeps String canonical.
		if len(values) == 1 && op == selection.In {
			op = selection.Equals
		} else if len(values) == 1 && op == selection.NotIn {
			op = selection.NotEquals
		}
	}
	r, err := labels.NewRequirement(t.lit, op, values)
	if err != nil {
		// The checks above are stricter than apimachinery's; this is a safety net.
		return labels.Requirement{}, p.fail(t.pos, "%v", err)
	}
	return *r, nil
}

// parseExactValue reads the single value after =, ==, !=, > or <; an absent
// value is the empty string, as in Kubernetes.
func (p *selectorParser) parseExactValue(op selection.Operator) ([]string, error) {
	integer := op == selection.GreaterThan || op == selection.LessThan
	t := p.peek(true)
	if t.kind == selTokEnd || t.kind == selTokComma {
		if integer {
			return nil, p.fail(t.pos, "found %s, expected: an integer after '>' or '<'", t.describe())
		}
		return []string{""}, nil
	}
	p.next(true)
	if t.kind != selTokIdent {
		return nil, p.fail(t.pos, "found %s, expected: a value", t.describe())
	}
	if err := p.checkValue(t); err != nil {
		return nil, err
	}
	if integer {
		if _, err := strconv.ParseInt(t.lit, 10, 64); err != nil {
			return nil, p.fail(t.pos, "invalid value %q: must be an integer for '>' and '<'", t.lit)
		}
	}
	return []string{t.lit}, nil
}

// parseSet reads "(v1,v2,...)". Empty elements, as in "(a,)" or "(,)", are
// the empty value, as in Kubernetes; "()" is rejected (see ParseSelector).
func (p *selectorParser) parseSet() ([]string, error) {
	t := p.next(true)
	if t.kind != selTokOpenPar {
		return nil, p.fail(t.pos, "found %s, expected: '('", t.describe())
	}
	if n := p.peek(true); n.kind == selTokClosePar {
		return nil, p.fail(n.pos, "empty value set: 'in' and 'notin' need at least one value")
	}
	set := map[string]bool{}
	expectValue := true
	for {
		t = p.next(true)
		switch {
		case t.kind == selTokIdent && expectValue:
			if err := p.checkValue(t); err != nil {
				return nil, err
			}
			set[t.lit] = true
			expectValue = false
		case t.kind == selTokComma:
			if expectValue {
				set[""] = true
			}
			expectValue = true
		case t.kind == selTokClosePar:
			if expectValue {
				set[""] = true
			}
			return slices.Sorted(maps.Keys(set)), nil
		case expectValue:
			return nil, p.fail(t.pos, "found %s, expected: a value, ',' or ')'", t.describe())
		default:
			return nil, p.fail(t.pos, "found %s, expected: ',' or ')'", t.describe())
		}
	}
}

func (p *selectorParser) checkValue(t selToken) error {
	if probs := labelValueProblems(t.lit); len(probs) > 0 {
		return p.fail(t.pos, "%s", labelMessage(fmt.Sprintf("value %q", t.lit), probs))
	}
	return nil
}
