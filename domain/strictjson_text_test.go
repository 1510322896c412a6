package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckJSONText covers what encoding/json lets pass silently: bytes that
// are not UTF-8 and keys given twice, at any depth, with paths named after
// the shape given.
func TestCheckJSONText(t *testing.T) {
	dup := func(field string) Cause { return Cause{Field: field, Type: CauseDuplicate, Message: msgDuplicateField} }
	tests := []struct {
		name string
		data string
		like any
		want []Cause
	}{
		{"fine", `{"a":{"b":[{"c":1},{"c":2}]},"d":"é"}`, nil, nil},
		{"equal keys in sibling objects", `[{"a":1},{"a":2}]`, nil, nil},
		{"top-level duplicate", `{"a":1,"a":2}`, nil, []Cause{dup("a")}},
		{"nested duplicate", `{"a":{"b":[{"c":1},{"c":2,"c":3}]}}`, nil, []Cause{dup("a.b.1.c")}},
		{"duplicate named by the object's shape", `{"metadata":{"labels":{"x":"1","x":"2"}},"spec":{"n":1,"n":2}}`, &Object{},
			[]Cause{dup("metadata.labels[x]"), dup("spec.n")}},
		{"invalid byte", "{\"a\":\"ok\xff\"}", nil, []Cause{{Type: CauseInvalid, Message: "invalid UTF-8 at byte offset 8"}}},
		{"encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", nil, []Cause{{Type: CauseInvalid, Message: "invalid UTF-8 at byte offset 6"}}},
		{"truncated sequence", "{\"\xc3\":1}", nil, []Cause{{Type: CauseInvalid, Message: "invalid UTF-8 at byte offset 2"}}},
		{"malformed is left to the decoder", `{"a":1,"a"`, nil, []Cause{dup("a")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, CheckJSONText([]byte(tt.data), "", tt.like))
		})
	}
	// DecodeStrict refuses invalid UTF-8 too, rather than decoding U+FFFD.
	var v struct{ A string }
	require.Equal(t, []Cause{{Field: "body", Type: CauseInvalid, Message: "invalid UTF-8 at byte offset 6"}},
		DecodeStrict([]byte("{\"A\":\"\xff\"}"), &v, "body"))
}
