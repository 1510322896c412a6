package domain

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestParseSelector(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	long64 := strings.Repeat("a", 64)
	tests := []struct {
		name string
		in   string
		// want is the canonical String of the parsed selector.
		want string
		// wantErr, when set, is a substring of the error message.
		wantErr string
		// wantOffset is the byte offset the error must name.
		wantOffset int
	}{
		{name: "empty", in: "", want: ""},
		{name: "blank", in: " \t\r\n ", want: ""},
		{name: "equals", in: "a=b", want: "a=b"},
		{name: "double equals", in: "a==b", want: "a=b"},
		{name: "not equals", in: "a!=b", want: "a!=b"},
		{name: "in", in: "a in (x,y)", want: "a in (x,y)"},
		{name: "notin sorted", in: "a notin (y,x)", want: "a notin (x,y)"},
		{name: "in deduplicated", in: "a in (y,x,y)", want: "a in (x,y)"},
		{name: "exists", in: "a", want: "a"},
		{name: "does not exist", in: "!a", want: "!a"},
		{name: "does not exist with blank", in: "! a", want: "!a"},
		{name: "and", in: "a=b,c=d", want: "a=b,c=d"},
		{name: "sorted by key", in: "c=d,a=b", want: "a=b,c=d"},
		{name: "blanks everywhere", in: "  a  =  b  ,  c  ,\t!d ", want: "a=b,c,!d"},
		{name: "set with spaces", in: "a in ( x , y )", want: "a in (x,y)"},
		{name: "set without space before paren", in: "a in(x,y)", want: "a in (x,y)"},
		{name: "tabs and newlines", in: "a\tnotin\n(x,y)", want: "a notin (x,y)"},
		{name: "empty value", in: "a=", want: "a="},
		{name: "empty value then more", in: "a=,b", want: "a=,b"},
		{name: "empty not equals", in: "a!=", want: "a!="},
		{name: "set with trailing comma", in: "a in (x,)", want: "a in (,x)"},
		{name: "set with leading comma", in: "a in (,x)", want: "a in (,x)"},
		{name: "set with double comma", in: "a in (x,,y)", want: "a in (,x,y)"},
		{name: "set of empty value", in: "a in (,)", want: "a="},
		{name: "set of one is equality", in: "a in (x)", want: "a=x"},
		{name: "notin of one is inequality", in: "a notin (x)", want: "a!=x"},
		{name: "prefixed key", in: "example.com/app=web", want: "example.com/app=web"},
		{name: "kubernetes key in set", in: "app.kubernetes.io/name in (web,db)", want: "app.kubernetes.io/name in (db,web)"},
		{name: "prefixed key does not exist", in: "!example.com/gone", want: "!example.com/gone"},
		{name: "keywords as key and value", in: "in=notin", want: "in=notin"},
		{name: "keywords as set values", in: "a in (in,notin)", want: "a in (in,notin)"},
		{name: "same key twice", in: "a=b,a!=c", want: "a!=c,a=b"},
		{name: "value characters", in: "a=B_c.d-9", want: "a=B_c.d-9"},
		{name: "longest value", in: "a=" + long63, want: "a=" + long63},
		{name: "longest key name", in: long63, want: long63},
		{name: "greater than", in: "x>5", want: "x>5"},
		{name: "less than", in: "x < 10", want: "x<10"},

		{name: "empty set", in: "a in ()", wantErr: "empty value set", wantOffset: 6},
		{name: "empty notin set", in: "a notin ( )", wantErr: "empty value set", wantOffset: 10},
		{name: "double operator", in: "a==b==c", wantErr: "found '==', expected: ',' or end of string", wantOffset: 4},
		{name: "triple equals", in: "a===b", wantErr: "found '=', expected: a value", wantOffset: 3},
		{name: "equals bang", in: "a=!b", wantErr: "found '!', expected: a value", wantOffset: 2},
		{name: "not equals equals", in: "a!==b", wantErr: "found '=', expected: a value", wantOffset: 3},
		{name: "missing operator", in: "a b", wantErr: "found 'b', expected: one of", wantOffset: 2},
		{name: "in without paren", in: "a in x", wantErr: "found 'x', expected: '('", wantOffset: 5},
		{name: "notin at end", in: "a notin", wantErr: "found end of string, expected: '('", wantOffset: 7},
		{name: "unclosed set", in: "a in (x", wantErr: "found end of string, expected: ',' or ')'", wantOffset: 7},
		{name: "set missing comma", in: "a in (x y)", wantErr: "found 'y', expected: ',' or ')'", wantOffset: 8},
		{name: "operator in set", in: "a in (=)", wantErr: "found '=', expected: a value, ',' or ')'", wantOffset: 6},
		{name: "extra paren", in: "a in (x))", wantErr: "found ')', expected: ',' or end of string", wantOffset: 8},
		{name: "lone comma", in: ",", wantErr: "found ',', expected: '!', a key or end of string", wantOffset: 0},
		{name: "trailing comma", in: "a,", wantErr: "found end of string, expected: '!' or a key after ','", wantOffset: 2},
		{name: "double comma", in: "a,,b", wantErr: "found ',', expected: '!' or a key after ','", wantOffset: 2},
		{name: "lone bang", in: "!", wantErr: "found end of string, expected: a key", wantOffset: 1},
		{name: "double bang", in: "!!a", wantErr: "found '!', expected: a key", wantOffset: 1},
		{name: "bang with operator", in: "!a=b", wantErr: "found '=', expected: ',' or end of string", wantOffset: 2},
		{name: "no key", in: "=b", wantErr: "found '=', expected: '!', a key or end of string", wantOffset: 0},
		{name: "garbage after value", in: "a=b c", wantErr: "found 'c', expected: ',' or end of string", wantOffset: 4},
		{name: "key starts with dash", in: "x=1,-a=b", wantErr: `invalid key "-a": name part must consist of`, wantOffset: 4},
		{name: "key with two slashes", in: "a/b/c=d", wantErr: "at most one '/'", wantOffset: 0},
		{name: "upper-case prefix", in: "Example.com/a=b", wantErr: "prefix part must be a lowercase DNS-1123 subdomain", wantOffset: 0},
		{name: "empty prefix", in: "/a=b", wantErr: "prefix part must not be empty", wantOffset: 0},
		{name: "empty name", in: "example.com/=b", wantErr: "name part must not be empty", wantOffset: 0},
		{name: "key name too long", in: long64 + "=b", wantErr: "name part must be no more than 63 characters", wantOffset: 0},
		{name: "value starts with dash", in: "a=-b", wantErr: `invalid value "-b": must be empty or consist of`, wantOffset: 2},
		{name: "value with slash", in: "a in (x,y/z)", wantErr: `invalid value "y/z"`, wantOffset: 8},
		{name: "value too long", in: "a=" + long64, wantErr: "must be no more than 63 characters", wantOffset: 2},
		{name: "non-integer for greater than", in: "x>abc", wantErr: "must be an integer for '>' and '<'", wantOffset: 2},
		{name: "missing integer", in: "x<", wantErr: "expected: an integer after '>' or '<'", wantOffset: 2},
		{name: "negative integer is not a label value", in: "x>-1", wantErr: `invalid value "-1"`, wantOffset: 2},
		{name: "non-ASCII key", in: "ключ=x", wantErr: `invalid key "ключ"`, wantOffset: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := ParseSelector(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseSelector(%q) = %q, want error containing %q", tt.in, sel.String(), tt.wantErr)
				}
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("error is %T, want *Error", err)
				}
				if e.Reason != ReasonBadRequest {
					t.Errorf("reason = %s, want %s", e.Reason, ReasonBadRequest)
				}
				if !strings.Contains(e.Message, tt.wantErr) {
					t.Errorf("message %q does not contain %q", e.Message, tt.wantErr)
				}
				if at := fmt.Sprintf("at byte offset %d:", tt.wantOffset); !strings.Contains(e.Message, at) {
					t.Errorf("message %q does not contain %q", e.Message, at)
				}
				if len(e.Causes) != 1 || e.Causes[0].Field != "labelSelector" || e.Causes[0].Type != CauseInvalid ||
					!strings.Contains(e.Causes[0].Message, tt.wantErr) {
					t.Errorf("causes = %+v, want one invalid labelSelector cause", e.Causes)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSelector(%q): %v", tt.in, err)
			}
			if got := sel.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if sel.Empty() != (tt.want == "") {
				t.Errorf("Empty() = %v for %q", sel.Empty(), tt.want)
			}
			// The canonical form parses back to the same selector.
			again, err := ParseSelector(sel.String())
			if err != nil {
				t.Fatalf("reparsing %q: %v", sel.String(), err)
			}
			if !reflect.DeepEqual(again, sel) {
				t.Errorf("reparsing %q gave %#v, want %#v", sel.String(), again, sel)
			}
		})
	}
}

func TestSelectorMatches(t *testing.T) {
	type L = map[string]string
	tests := []struct {
		sel    string
		labels L
		want   bool
	}{
		{"", nil, true},
		{"", L{"a": "b"}, true},
		{"a=b", L{"a": "b"}, true},
		{"a=b", L{"a": "c"}, false},
		{"a=b", nil, false},
		{"a==b", L{"a": "b", "x": "y"}, true},
		// != and notin match objects that lack the key, as in Kubernetes.
		{"a!=b", nil, true},
		{"a!=b", L{"a": "b"}, false},
		{"a!=b", L{"a": "c"}, true},
		{"a notin (x,y)", L{}, true},
		{"a notin (x,y)", L{"a": "x"}, false},
		{"a notin (x,y)", L{"a": "z"}, true},
		{"a in (x,y)", L{}, false},
		{"a in (x,y)", L{"a": "y"}, true},
		{"a in (x,y)", L{"a": "z"}, false},
		{"a", L{"a": ""}, true},
		{"a", L{"b": "a"}, false},
		{"!a", nil, true},
		{"!a", L{"a": ""}, false},
		{"a=", L{"a": ""}, true},
		{"a=", nil, false},
		{"a=", L{"a": "x"}, false},
		{"a!=", nil, true},
		{"a!=", L{"a": ""}, false},
		{"a in (x,)", L{"a": ""}, true},
		{"a in (x,)", L{"a": "x"}, true},
		{"a in (x,)", nil, false},
		{"a=b,c", L{"a": "b", "c": "x"}, true},
		{"a=b,c", L{"a": "b"}, false},
		{"a=b,!c", L{"a": "b"}, true},
		{"a=b,a=c", L{"a": "b"}, false},
		{"example.com/tier in (web)", L{"example.com/tier": "web"}, true},
		{"example.com/tier in (web)", L{"tier": "web"}, false},
		{"x>5", L{"x": "6"}, true},
		{"x>5", L{"x": "5"}, false},
		{"x>5", L{"x": "abc"}, false},
		{"x>5", nil, false},
		{"x<5", L{"x": "4"}, true},
		{"x<5", L{"x": "05"}, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%v", tt.sel, tt.labels), func(t *testing.T) {
			sel, err := ParseSelector(tt.sel)
			if err != nil {
				t.Fatalf("ParseSelector(%q): %v", tt.sel, err)
			}
			if got := sel.Matches(tt.labels); got != tt.want {
				t.Errorf("%q.Matches(%v) = %v, want %v", tt.sel, tt.labels, got, tt.want)
			}
		})
	}
}

func TestSelectorZeroValue(t *testing.T) {
	var s Selector
	if !s.Empty() || s.String() != "" || !s.Matches(nil) || !s.Matches(map[string]string{"a": "b"}) {
		t.Errorf("zero Selector must be empty and match everything")
	}
	parsed, err := ParseSelector("")
	if err != nil || !reflect.DeepEqual(parsed, s) {
		t.Errorf(`ParseSelector("") = %#v, %v; want the zero Selector`, parsed, err)
	}
}

func TestValidateLabels(t *testing.T) {
	f := field.NewPath("metadata", "labels")
	many := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	tests := []struct {
		name   string
		labels map[string]string
		// want lists field and type of each cause, in order.
		want []string
	}{
		{name: "nil", labels: nil},
		{name: "valid", labels: map[string]string{
			"app": "web", "app.kubernetes.io/name": "my_App-1.0", "example.com/empty": "", "A": "Z",
			strings.Repeat("n", 63): strings.Repeat("v", 63), strings.Repeat("p", 253) + "/x": "y",
		}},
		{name: "name starts with dash", labels: map[string]string{"-app": "x"},
			want: []string{"metadata.labels[-app] " + CauseInvalid}},
		{name: "name with space", labels: map[string]string{"my app": "x"},
			want: []string{"metadata.labels[my app] " + CauseInvalid}},
		{name: "empty key", labels: map[string]string{"": "x"},
			want: []string{"metadata.labels[] " + CauseInvalid}},
		{name: "upper-case prefix", labels: map[string]string{"Example.com/app": "x"},
			want: []string{"metadata.labels[Example.com/app] " + CauseInvalid}},
		{name: "two slashes", labels: map[string]string{"a/b/c": "x"},
			want: []string{"metadata.labels[a/b/c] " + CauseInvalid}},
		{name: "name too long", labels: map[string]string{strings.Repeat("n", 64): "x"},
			want: []string{"metadata.labels[" + strings.Repeat("n", 64) + "] " + CauseTooLong}},
		{name: "prefix too long", labels: map[string]string{strings.Repeat("p", 254) + "/x": "y"},
			want: []string{"metadata.labels[" + strings.Repeat("p", 254) + "/x] " + CauseTooLong}},
		{name: "bad value", labels: map[string]string{"app": "web server"},
			want: []string{"metadata.labels[app] " + CauseInvalid}},
		{name: "value too long", labels: map[string]string{"app": strings.Repeat("v", 64)},
			want: []string{"metadata.labels[app] " + CauseTooLong}},
		{name: "value too long and bad", labels: map[string]string{"app": strings.Repeat("v", 64) + "-"},
			want: []string{"metadata.labels[app] " + CauseInvalid}},
		{name: "bad key and value, sorted", labels: map[string]string{"b!": "-", "a": "ok", "-c": "ok"},
			want: []string{"metadata.labels[-c] " + CauseInvalid, "metadata.labels[b!] " + CauseInvalid, "metadata.labels[b!] " + CauseInvalid}},
		{name: "64 labels", labels: many(64)},
		{name: "65 labels", labels: many(65), want: []string{"metadata.labels " + CauseTooLong}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			causes := ValidateLabels(tt.labels, f)
			var got []string
			for _, c := range causes {
				got = append(got, c.Field+" "+c.Type)
				if c.Message == "" {
					t.Errorf("cause %+v has no message", c)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ValidateLabels = %+v, want %v", causes, tt.want)
			}
		})
	}
	if c := ValidateLabels(map[string]string{"a": "-"}, f); len(c) != 1 || !strings.HasPrefix(c[0].Message, "invalid value: ") {
		t.Errorf("value cause must say it is about the value: %+v", c)
	}
	if c := ValidateLabels(map[string]string{"-": "a"}, f); len(c) != 1 || !strings.HasPrefix(c[0].Message, "invalid key: ") {
		t.Errorf("key cause must say it is about the key: %+v", c)
	}
}

func TestValidateAnnotations(t *testing.T) {
	f := field.NewPath("metadata", "annotations")
	tests := []struct {
		name        string
		annotations map[string]string
		want        []string
	}{
		{name: "nil", annotations: nil},
		{name: "free-form values", annotations: map[string]string{
			"example.com/note": "any text at all, / even { json }", "kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 100000),
		}},
		{name: "bad key", annotations: map[string]string{"bad key": "x", "ok": "y"},
			want: []string{"metadata.annotations[bad key] " + CauseInvalid}},
		{name: "exactly at the limit", annotations: map[string]string{"a": strings.Repeat("x", MaxAnnotationsTotalSize-1)}},
		{name: "over the limit", annotations: map[string]string{"a": strings.Repeat("x", MaxAnnotationsTotalSize/2), "b": strings.Repeat("x", MaxAnnotationsTotalSize/2)},
			want: []string{"metadata.annotations " + CauseTooLong}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range ValidateAnnotations(tt.annotations, f) {
				got = append(got, c.Field+" "+c.Type)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ValidateAnnotations = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSelectorMatchesPairs checks that labels kept as LabelPairs match as the
// map they came from does.
func TestSelectorMatchesPairs(t *testing.T) {
	objects := []map[string]string{nil, {}, {"a": "b"}, {"a": ""}, {"a": "c", "x": "6"}, {"example.com/tier": "web", "x": "4"}}
	for _, sel := range []string{"", "a=b", "a!=b", "a", "!a", "a in (b,c)", "a notin (b)", "x>5", "x<5", "example.com/tier=web,!a"} {
		s, err := ParseSelector(sel)
		if err != nil {
			t.Fatalf("ParseSelector(%q): %v", sel, err)
		}
		for _, m := range objects {
			if got, want := s.MatchesPairs(NewLabelPairs(m)), s.Matches(m); got != want {
				t.Errorf("%q.MatchesPairs(%v) = %v, Matches = %v", sel, m, got, want)
			}
		}
	}
}
