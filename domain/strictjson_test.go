package domain

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	kjson "sigs.k8s.io/json"
)

type strictTaint struct {
	Key    string `json:"key"`
	Effect string `json:"effect,omitempty"`
	Weight int    `json:"weight,omitempty"`
}

type strictNetwork struct {
	PodSubnets []string `json:"podSubnets"`
	MTU        uint16   `json:"mtu,omitempty"`
}

type strictBase struct {
	Name   string `json:"name"`
	Hidden string `json:"-"`
}

// StrictExtra is exported so that it can be embedded through a pointer.
type StrictExtra struct {
	Extra bool `json:"extra"`
}

// strictSelfDecoding decodes itself through encoding/json, as many types do to
// add defaults; its errors come back as UnmarshalTypeError relative to it.
type strictSelfDecoding struct {
	Items []struct {
		N int `json:"n"`
	} `json:"items"`
}

func (s *strictSelfDecoding) UnmarshalJSON(b []byte) error {
	type plain strictSelfDecoding
	return json.Unmarshal(b, (*plain)(s))
}

type strictSpec struct {
	strictBase
	*StrictExtra
	Network  strictNetwork            `json:"network"`
	Taints   []strictTaint            `json:"taints,omitempty"`
	Labels   map[string]string        `json:"labels,omitempty"`
	Config   map[string]any           `json:"config,omitempty"`
	Raw      json.RawMessage          `json:"raw,omitempty"`
	Free     any                      `json:"free,omitempty"`
	Pools    map[string]strictNetwork `json:"pools,omitempty"`
	Count    *int                     `json:"count,omitempty"`
	Ratio    float32                  `json:"ratio,omitempty"`
	Enabled  bool                     `json:"enabled"`
	Grid     [][]int8                 `json:"grid,omitempty"`
	Pair     [2]int                   `json:"pair"`
	Data     []byte                   `json:"data,omitempty"`
	When     time.Time                `json:"when,omitzero"`
	Quoted   int64                    `json:"quoted,string,omitempty"`
	Untagged string
	Self     strictSelfDecoding `json:"self"`
	ByPort   map[int]string     `json:"byPort,omitempty"`
	//lint:ignore U1000 an unexported field is what the decoder must skip
	unexported int
}

type strictInner struct {
	X int `json:"x"`
}

// strictHasUnexportedPtr trips encoding/json in a way the walk does not
// foresee, to exercise the safety net.
type strictHasUnexportedPtr struct {
	*strictInner
}

func unknown(field string) Cause {
	return Cause{Field: field, Type: CauseUnknownField, Message: "unknown field"}
}

func typeInvalid(field, msg string) Cause {
	return Cause{Field: field, Type: CauseTypeInvalid, Message: msg}
}

func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Cause
		// wantPrefix, for causes whose message comes from elsewhere, checks
		// field and type exactly and the message by prefix.
		wantPrefix bool
	}{
		{name: "valid document", in: `{
			"name": "n", "extra": true, "network": {"podSubnets": ["10.0.0.0/16"], "mtu": 1500},
			"taints": [{"key": "a", "effect": "NoSchedule", "weight": -3}],
			"labels": {"anything": "goes", "Network": "too"},
			"config": {"a": {"b": [1, {"c": null}, "x", true]}},
			"raw": {"whatever": [1, 2]}, "free": [{"x": 1}],
			"pools": {"p1": {"mtu": 9000}}, "count": 3, "ratio": 0.5, "enabled": false,
			"grid": [[1, -128], [127]], "pair": [1, 2], "data": "aGVsbG8=",
			"when": "2024-01-02T03:04:05Z", "quoted": "42", "Untagged": "u",
			"self": {"items": [{"n": 1}]}, "byPort": {"80": "http"}
		}`},
		{name: "empty object", in: `{}`},
		{name: "trailing blanks", in: "{}  \n\t"},
		{name: "null document", in: `null`},
		{name: "nulls everywhere", in: `{"network": null, "taints": [null, {"key": null}], "labels": null, "count": null,
			"name": null, "pools": {"p": null}, "grid": [null, [null]], "when": null, "self": null, "quoted": null, "data": null}`},
		{name: "extra array elements are dropped", in: `{"pair": [1, 2, "three"]}`},
		{name: "byte slice as array", in: `{"data": [1, 2]}`},

		{name: "unknown nested field", in: `{"network":{"podSubnetz":[]}}`,
			want: []Cause{unknown("spec.network.podSubnetz")}},
		{name: "every unknown field", in: `{"zeta": 1, "alpha": {"deep": 1}, "network": {"x": 1, "y": 2}}`,
			want: []Cause{unknown("spec.alpha"), unknown("spec.network.x"), unknown("spec.network.y"), unknown("spec.zeta")}},
		{name: "unknown field in slice element", in: `{"taints":[{"key":"a"},{"key":"b"},{"key":"c","efect":"NoSchedule"}]}`,
			want: []Cause{unknown("spec.taints[2].efect")}},
		{name: "unknown field in map value", in: `{"pools":{"p1":{"mtu":1500,"bogus":1}}}`,
			want: []Cause{unknown("spec.pools[p1].bogus")}},
		{name: "case matters", in: `{"Network": {}, "network": {"PodSubnets": []}, "untagged": "x", "Name": "n"}`,
			want: []Cause{unknown("spec.Name"), unknown("spec.Network"), unknown("spec.network.PodSubnets"), unknown("spec.untagged")}},
		{name: "embedded structs are not fields", in: `{"strictBase": {}, "StrictExtra": {}}`,
			want: []Cause{unknown("spec.StrictExtra"), unknown("spec.strictBase")}},
		{name: "dash tag and unexported", in: `{"Hidden": "h", "-": 1, "unexported": 1}`,
			want: []Cause{unknown("spec.-"), unknown("spec.Hidden"), unknown("spec.unexported")}},

		{name: "string for integer", in: `{"count":"3"}`,
			want: []Cause{typeInvalid("spec.count", "must be integer, got string")}},
		{name: "number for string", in: `{"name":5}`,
			want: []Cause{typeInvalid("spec.name", "must be string, got number")}},
		{name: "fraction for integer", in: `{"count":1.5}`,
			want: []Cause{typeInvalid("spec.count", "must be integer, got number 1.5")}},
		{name: "exponent for integer", in: `{"count":1e3}`,
			want: []Cause{typeInvalid("spec.count", "must be integer, got number 1e3")}},
		{name: "negative for unsigned", in: `{"network":{"mtu":-1}}`,
			want: []Cause{typeInvalid("spec.network.mtu", "must be non-negative integer, got number -1")}},
		{name: "unsigned overflow", in: `{"network":{"mtu":70000}}`,
			want: []Cause{typeInvalid("spec.network.mtu", "must be integer between 0 and 65535, got number 70000")}},
		{name: "int64 overflow", in: `{"count":99999999999999999999}`,
			want: []Cause{typeInvalid("spec.count", "must be integer between -9223372036854775808 and 9223372036854775807, got number 99999999999999999999")}},
		{name: "nested slice index", in: `{"grid":[[1],[2,200]]}`,
			want: []Cause{typeInvalid("spec.grid[1][1]", "must be integer between -128 and 127, got number 200")}},
		{name: "float32 overflow", in: `{"ratio":1e39}`,
			want: []Cause{typeInvalid("spec.ratio", "must be number within the range of float32, got number 1e39")}},
		{name: "string for boolean", in: `{"enabled":"true"}`,
			want: []Cause{typeInvalid("spec.enabled", "must be boolean, got string")}},
		{name: "boolean for string in slice", in: `{"network":{"podSubnets":["a",true]}}`,
			want: []Cause{typeInvalid("spec.network.podSubnets[1]", "must be string, got boolean")}},
		{name: "object for slice", in: `{"taints":{}}`,
			want: []Cause{typeInvalid("spec.taints", "must be array, got object")}},
		{name: "array for struct", in: `{"network":[]}`,
			want: []Cause{typeInvalid("spec.network", "must be object, got array")}},
		{name: "wrong map value", in: `{"labels":{"a":1}}`,
			want: []Cause{typeInvalid("spec.labels[a]", "must be string, got number")}},
		{name: "wrong array element", in: `{"pair":[1,"x"]}`,
			want: []Cause{typeInvalid("spec.pair[1]", "must be integer, got string")}},
		{name: "bad map key", in: `{"byPort":{"http":"x","99999999999999999999":"y"}}`,
			want: []Cause{
				typeInvalid("spec.byPort[99999999999999999999]", `key must be integer between -9223372036854775808 and 9223372036854775807, got "99999999999999999999"`),
				typeInvalid("spec.byPort[http]", `key must be integer, got "http"`),
			}},
		{name: "bad base64", in: `{"data":"***"}`,
			want: []Cause{{Field: "spec.data", Type: CauseInvalid, Message: "must be base64-encoded: illegal base64 data at input byte 0"}}},
		{name: "number for bytes", in: `{"data":5}`,
			want: []Cause{typeInvalid("spec.data", "must be base64 string or array, got number")}},
		{name: "quoted field unquoted", in: `{"quoted":42}`,
			want: []Cause{typeInvalid("spec.quoted", "must be string holding integer, got number")}},
		{name: "quoted field not a number", in: `{"quoted":"x"}`,
			want: []Cause{typeInvalid("spec.quoted", `must be string holding integer, got string "x"`)}},
		{name: "quoted field wrong type inside", in: `{"quoted":"\"42\""}`,
			want: []Cause{typeInvalid("spec.quoted", "must be integer, got string")}},
		{name: "top-level array", in: `[]`,
			want: []Cause{typeInvalid("spec", "must be object, got array")}},
		{name: "self-decoding type reports its own error", in: `{"when":"yesterday"}`, wantPrefix: true,
			want: []Cause{{Field: "spec.when", Type: CauseInvalid, Message: `parsing time "yesterday"`}}},
		{name: "all problems at once, sorted", in: `{"zzz": 1, "taints": [{"key": 1}, {"key": "b", "weight": "x", "nope": 0}], "name": 2}`,
			want: []Cause{
				typeInvalid("spec.name", "must be string, got number"),
				typeInvalid("spec.taints[0].key", "must be string, got number"),
				unknown("spec.taints[1].nope"),
				typeInvalid("spec.taints[1].weight", "must be integer, got string"),
				unknown("spec.zzz"),
			}},

		{name: "syntax error", in: `{"name":}`, wantPrefix: true,
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "malformed JSON at byte offset 8: invalid character '}'"}}},
		{name: "missing colon", in: `{"name" "x"}`, wantPrefix: true,
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "malformed JSON at byte offset 8: invalid character '\"' after object key"}}},
		{name: "truncated", in: `{"name":"x"`,
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "malformed JSON at byte offset 11: unexpected end of input"}}},
		{name: "empty input", in: ``,
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "malformed JSON at byte offset 0: empty document"}}},
		{name: "blank input", in: "  \n",
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "malformed JSON at byte offset 0: empty document"}}},
		{name: "trailing value", in: `{"name":"x"} {}`,
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "malformed JSON at byte offset 13: unexpected data after the top-level value"}}},
		{name: "trailing garbage after number", in: `123abc`,
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "malformed JSON at byte offset 3: unexpected data after the top-level value"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v strictSpec
			got := DecodeStrict([]byte(tt.in), &v, "spec")
			if tt.want == nil {
				if got != nil {
					t.Fatalf("DecodeStrict = %+v, want nil", got)
				}
				return
			}
			if tt.wantPrefix {
				if len(got) != len(tt.want) {
					t.Fatalf("DecodeStrict = %+v, want %+v", got, tt.want)
				}
				for i := range got {
					g, w := got[i], tt.want[i]
					if g.Field != w.Field || g.Type != w.Type || !strings.HasPrefix(g.Message, w.Message) {
						t.Errorf("cause %d = %+v, want %+v (message as prefix)", i, g, w)
					}
				}
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeStrict =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeStrictFillsValue(t *testing.T) {
	var v strictSpec
	in := `{"name":"n","extra":true,"taints":[{"key":"k"}],"quoted":"7","count":2,"self":{"items":[{"n":5}]},"byPort":{"443":"https"}}`
	if c := DecodeStrict([]byte(in), &v, "spec"); c != nil {
		t.Fatalf("DecodeStrict: %+v", c)
	}
	if v.Name != "n" || v.StrictExtra == nil || !v.Extra || len(v.Taints) != 1 || v.Taints[0].Key != "k" ||
		v.Quoted != 7 || v.Count == nil || *v.Count != 2 || len(v.Self.Items) != 1 || v.Self.Items[0].N != 5 || v.ByPort[443] != "https" {
		t.Errorf("decoded %+v", v)
	}
}

func TestDecodeStrictRootAndTargets(t *testing.T) {
	tests := []struct {
		name string
		in   string
		v    any
		root string
		want []Cause
	}{
		{name: "empty root", in: `{"network":{"x":1}}`, v: &strictSpec{}, root: "", want: []Cause{unknown("network.x")}},
		{name: "slice at the top", in: `[{"key":"a"},{"kye":"b"}]`, v: &[]strictTaint{}, root: "spec.taints",
			want: []Cause{unknown("spec.taints[1].kye")}},
		{name: "slice at the top, empty root", in: `[{"key":"a"},{"kye":"b"}]`, v: &[]strictTaint{}, root: "",
			want: []Cause{unknown("[1].kye")}},
		{name: "map at the top", in: `{"a":{"mtu":"x"}}`, v: &map[string]strictNetwork{}, root: "pools",
			want: []Cause{typeInvalid("pools[a].mtu", "must be integer, got string")}},
		{name: "raw message at the top", in: `{"anything":[1]}`, v: &json.RawMessage{}, root: "spec"},
		{name: "text key", in: `{"good":1,"bad":"x"}`, v: &map[strictTextKey]int{}, root: "m",
			want: []Cause{typeInvalid("m[bad]", "invalid key: bad key")}},
		{name: "unsigned key", in: `{"-1":1}`, v: &map[uint8]int{}, root: "m",
			want: []Cause{typeInvalid("m[-1]", `key must be non-negative integer, got "-1"`)}},
		{name: "not a pointer", in: `{}`, v: strictSpec{}, root: "spec",
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "cannot decode into domain.strictSpec: need a non-nil pointer"}}},
		{name: "nil pointer", in: `{}`, v: (*strictSpec)(nil), root: "spec",
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "cannot decode into *domain.strictSpec: need a non-nil pointer"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DecodeStrict([]byte(tt.in), tt.v, tt.root); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeStrict = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDecodeStrictLeftToEncodingJSON covers what the walk leaves to
// encoding/json to judge.
func TestDecodeStrictLeftToEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string
		v    any
		want []Cause
	}{
		{name: "safety net for what the walk cannot foresee", in: `{"x":1}`, v: &strictHasUnexportedPtr{},
			want: []Cause{{Field: "spec", Type: CauseInvalid, Message: "cannot set embedded pointer to unexported struct: domain.strictInner"}}},
		{name: "unsupported key type", in: `{"true":1}`, v: &map[bool]int{},
			want: []Cause{typeInvalid("spec", "cannot decode object into map[bool]int")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecodeStrict([]byte(tt.in), tt.v, "spec")
			if syntaxOffsetPastBadByte() == 0 {
				// GOEXPERIMENT=jsonv2 judges these differently; one cause
				// under spec is all that can be said.
				if len(got) != 1 || !strings.HasPrefix(got[0].Field, "spec") {
					t.Errorf("DecodeStrict = %+v, want one cause under spec", got)
				}
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeStrict = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestUnmarshalTypeErrorField pins down what encoding/json puts in
// UnmarshalTypeError.Field, which typeErrorPath depends on. With Go 1.26's
// default encoding/json it is "taints.weight": JSON names, no index; with
// GOEXPERIMENT=jsonv2 it is "taints.1.weight".
func TestUnmarshalTypeErrorField(t *testing.T) {
	var v strictSpec
	err := json.Unmarshal([]byte(`{"taints":[{},{"weight":"x"}]}`), &v)
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		t.Fatalf("error %v is not an UnmarshalTypeError", err)
	}
	got := typeErrorPath("spec", reflect.TypeFor[strictSpec](), te.Field)
	switch te.Field {
	case "taints.weight":
		if got != "spec.taints[*].weight" {
			t.Errorf("path for %q = %q", te.Field, got)
		}
	case "taints.1.weight":
		if got != "spec.taints[1].weight" {
			t.Errorf("path for %q = %q", te.Field, got)
		}
	default:
		t.Errorf("UnmarshalTypeError.Field = %q, a shape typeErrorPath was not written for", te.Field)
	}

	// A type that decodes itself through encoding/json gets its error's
	// path joined to its own.
	c := DecodeStrict([]byte(`{"self":{"items":[{"n":1},{"n":"x"}]}}`), &v, "spec")
	if len(c) != 1 || c[0].Type != CauseTypeInvalid || c[0].Message != "must be integer, got string" ||
		(c[0].Field != "spec.self.items[*].n" && c[0].Field != "spec.self.items[1].n") {
		t.Errorf("DecodeStrict = %+v, want a type error at spec.self.items[*].n", c)
	}
}

type strictRecList []strictRecList

// strictTextKey is a map key that parses itself and refuses "bad".
type strictTextKey string

func (k *strictTextKey) UnmarshalText(b []byte) error {
	if string(b) == "bad" {
		return errors.New("bad key")
	}
	*k = strictTextKey(b)
	return nil
}

func TestTypeErrorPath(t *testing.T) {
	spec := reflect.TypeFor[strictSpec]()
	tests := []struct {
		field string
		want  string
	}{
		{"", "spec"},
		{"network.mtu", "spec.network.mtu"},
		{"network.podSubnets", "spec.network.podSubnets"},
		{"network.podSubnets.3", "spec.network.podSubnets[3]"},
		{"taints.weight", "spec.taints[*].weight"},
		{"taints.2.weight", "spec.taints[2].weight"},
		// Go 1.26 names an embedded struct by its Go name before a promoted field.
		{"strictBase.name", "spec.name"},
		{"name", "spec.name"},
		{"StrictExtra.extra", "spec.extra"},
		{"pools.mtu", "spec.pools[*].mtu"},
		{"pools.p1.mtu", "spec.pools[p1].mtu"},
		{"labels", "spec.labels"},
		{"labels.a", "spec.labels[a]"},
		{"grid", "spec.grid"},
		{"grid.1.1", "spec.grid[1][1]"},
		{"nope.x", "spec.nope.x"},
		{"network.nope.x", "spec.network.nope.x"},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			if got := typeErrorPath("spec", spec, tt.field); got != tt.want {
				t.Errorf("typeErrorPath(%q) = %q, want %q", tt.field, got, tt.want)
			}
		})
	}
	// A type without end must not loop.
	if got := typeErrorPath("l", reflect.TypeFor[strictRecList](), "x.y"); got != "l.x.y" {
		t.Errorf("typeErrorPath on a recursive type = %q", got)
	}
}

func TestStrictFieldsFollowsEncodingJSON(t *testing.T) {
	type A struct {
		Shared int
		OnlyA  int `json:"onlyA"`
	}
	type B struct {
		Shared int
		Tagged int `json:"tagged"`
	}
	type C struct {
		Tagged int
	}
	type outer struct {
		A
		B
		C
		Own   int `json:"own"`
		Named A   `json:"named"`
		//lint:ignore SA5008 a malformed tag is what the walker must read as encoding/json does
		Bad string `json:"a\\b"`
	}
	got := strictFields(reflect.TypeFor[outer]())
	var names []string
	for n := range got {
		names = append(names, n)
	}
	// "Shared" clashes at one depth and vanishes, "tagged" goes to B's
	// tagged field, and a tag encoding/json rejects falls back to the Go name.
	for _, n := range []string{"onlyA", "tagged", "own", "named", "Bad"} {
		if _, ok := got[n]; !ok {
			t.Errorf("field %q missing from %v", n, names)
		}
	}
	if _, ok := got["Shared"]; ok {
		t.Errorf("clashing field %q must vanish, as in encoding/json", "Shared")
	}
	if f := got["tagged"]; !reflect.DeepEqual(f.index, []int{1, 1}) {
		t.Errorf("tagged resolves to index %v, want [1 1]", f.index)
	}
	// Cross-check with encoding/json itself: the clashing field is ignored there too.
	var o outer
	if err := json.Unmarshal([]byte(`{"Shared":1,"tagged":2}`), &o); err != nil || o.A.Shared != 0 || o.B.Shared != 0 || o.B.Tagged != 2 {
		t.Errorf("encoding/json disagrees: %+v, %v", o, err)
	}
	if c := DecodeStrict([]byte(`{"Shared":1}`), &o, ""); !reflect.DeepEqual(c, []Cause{unknown("Shared")}) {
		t.Errorf("DecodeStrict = %+v, want Shared unknown", c)
	}
}

// TestDecodeStrictDuplicateKeys covers keys given twice in one object, which
// sigs.k8s.io/json finds: the path names the second occurrence's field, map
// keys with dots included.
func TestDecodeStrictDuplicateKeys(t *testing.T) {
	dup := func(field string) Cause { return Cause{Field: field, Type: CauseDuplicate, Message: "duplicate field"} }
	tests := []struct {
		name string
		in   string
		v    any
		root string
		want []Cause
	}{
		{name: "top-level field", in: `{"name":"a","name":"b"}`, v: &strictSpec{}, root: "spec", want: []Cause{dup("spec.name")}},
		{name: "in a slice element", in: `{"taints":[{"key":"a"},{"key":"b","key":"c"}]}`, v: &strictSpec{}, root: "spec",
			want: []Cause{dup("spec.taints[1].key")}},
		{name: "label key with dots", in: `{"labels":{"app.kubernetes.io/name":"a","app.kubernetes.io/name":"b"}}`, v: &strictSpec{}, root: "spec",
			want: []Cause{dup("spec.labels[app.kubernetes.io/name]")}},
		{name: "inside a map value", in: `{"pools":{"p.1":{"mtu":1,"mtu":2}}}`, v: &strictSpec{}, root: "spec",
			want: []Cause{dup("spec.pools[p.1].mtu")}},
		{name: "inside free-form JSON", in: `{"config":{"a":{"b":1,"b":2}}}`, v: &strictSpec{}, root: "spec",
			want: []Cause{dup("spec.config[a].b")}},
		{name: "several, sorted", in: `{"pair":[1,2],"name":"a","pair":[3,4],"name":"b"}`, v: &strictSpec{}, root: "spec",
			want: []Cause{dup("spec.name"), dup("spec.pair")}},
		{name: "slice at the top", in: `[{"key":"a","key":"b"}]`, v: &[]strictTaint{}, root: "t", want: []Cause{dup("t[0].key")}},
		{name: "empty root", in: `{"name":"a","name":"b"}`, v: &strictSpec{}, root: "", want: []Cause{dup("name")}},
		// Type errors come first; duplicates are reported once they are fixed.
		{name: "with a type error", in: `{"name":1,"enabled":true,"enabled":false}`, v: &strictSpec{}, root: "spec",
			want: []Cause{typeInvalid("spec.name", "must be string, got number")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DecodeStrict([]byte(tt.in), tt.v, tt.root); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeStrict = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzDecodeStrictFastPath holds DecodeStrict's one strict decode, which
// accepts a document on its own, to the walk's verdict: a document the walk
// finds a cause in must fail the strict decode too.
func FuzzDecodeStrictFastPath(f *testing.F) {
	for _, seed := range []string{
		`{"name":"a","network":{"podSubnets":["10.0.0.0/8"],"mtu":1500},"pair":[1,2],"enabled":true}`,
		`{"Name":"a"}`, `{"network":{"mtu":70000}}`, `{"pair":[1,2,3]}`, `{"quoted":"12"}`, `{"quoted":12}`,
		`{"byPort":{"80":"http"}}`, `{"byPort":{"x":"http"}}`, `{"data":"aGk="}`, `{"data":"!"}`,
		`{"self":{"items":[{"n":"1"}]}}`, `{"when":"2026-01-01T00:00:00Z"}`, `{"when":"x"}`,
		`{"name":"a","name":"b"}`, `{"taints":[{"key":"k","weight":1.5}]}`, `{"extra":true}`, `{"count":null}`,
		`{"ratio":1e39}`, `{"grid":[[1,-129]]}`, `{"Untagged":"x"}`, `{"untagged":"x"}`, `{} x`, `[]`, `null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return // refused before either runs
		}
		var fast, slow strictSpec
		fastOK := false
		if strictErrs, err := kjson.UnmarshalStrict(data, &fast); err == nil && len(strictErrs) == 0 {
			fastOK = true
		}
		causes := walkStrict(data, reflect.ValueOf(&slow), "spec")
		if fastOK && len(causes) > 0 {
			t.Fatalf("the strict decode accepted %q, the walk found %v", data, causes)
		}
		if fastOK && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q decoded differently: %+v and %+v", data, fast, slow)
		}
		if !fastOK && len(causes) == 0 {
			t.Fatalf("the strict decode refused %q, the walk found nothing", data)
		}
	})
}
