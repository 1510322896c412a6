package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDocuments(t *testing.T) {
	f, err := os.Open("testdata/cluster.yaml")
	require.NoError(t, err)
	defer f.Close()
	docs, err := parseDocuments(f, "cluster.yaml")
	require.NoError(t, err)
	require.Len(t, docs, 3, "empty documents are skipped")

	assert.Equal(t, "Tenant", docs[0].Kind)
	assert.Equal(t, "rezuscloud.io/v1", docs[0].APIVersion)
	assert.Equal(t, "acme", docs[0].Name)
	assert.Equal(t, "cluster.yaml (document 1, line 2)", docs[0].Source)
	assert.JSONEq(t, `{"apiVersion":"rezuscloud.io/v1","kind":"Tenant","metadata":{"name":"acme","labels":{"env":"prod"}},"spec":{"talosVersion":"v1.13.0"}}`, string(docs[0].Raw))

	assert.Equal(t, "acme", docs[1].Tenant)
	assert.Equal(t, "cluster.yaml (document 3, line 12)", docs[1].Source)
	// Timestamps stay strings, numbers stay numbers, YAML 1.1 "yes" is a string in YAML 1.2.
	assert.JSONEq(t, `{"kind":"NodeGroup","metadata":{"name":"cp","tenant":"acme"},"spec":{"role":"controlplane","count":3,"provider":"emu",
		"providerConfig":{"created":"2026-01-02T03:04:05Z","size":1.5,"on":"yes"}}}`, string(docs[1].Raw))

	assert.Equal(t, "ng", docs[2].Kind, "kind names are resolved when applied")
	assert.Equal(t, "", docs[2].Tenant)
}

func TestParseDocumentsJSONList(t *testing.T) {
	f, err := os.Open("testdata/list.json")
	require.NoError(t, err)
	defer f.Close()
	docs, err := parseDocuments(f, "list.json")
	require.NoError(t, err)
	require.Len(t, docs, 2, "a List's items are documents")
	assert.Equal(t, []string{"a", "b"}, []string{docs[0].Name, docs[1].Name})
	assert.Equal(t, "list.json (document 1, line 1) item 1", docs[1].Source)
}

func TestParseDocumentsErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"no kind", "metadata: {name: a}\n", "in (document 1, line 1): kind is missing"},
		{"no name", "kind: Tenant\nmetadata: {}\n", "metadata.name is missing"},
		{"not an object", "- a\n- b\n", "not an object"},
		{"bad yaml", "kind: Tenant\nmetadata: {name: a\n", "in: document 1"},
		{"second document bad", "kind: Tenant\nmetadata: {name: a}\n---\nkind: [\n", "document 2"},
		{"non-string keys", "kind: Tenant\nmetadata: {name: a}\nspec: {1: x}\n", "key 1 is not a string"},
		{"infinity", "kind: Tenant\nmetadata: {name: a}\nspec: {x: .inf}\n", "not a JSON number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseDocuments(strings.NewReader(tt.in), "in")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestReadManifests(t *testing.T) {
	docs, err := readManifests([]string{"testdata/manifests"}, nil)
	require.NoError(t, err)
	require.Len(t, docs, 2, "only .yaml, .yml and .json files, in name order")
	assert.Equal(t, "dir-tenant", docs[0].Name)
	assert.Equal(t, "emu", docs[1].Name)

	docs, err = readManifests([]string{"-", "testdata/list.json"}, strings.NewReader("kind: Tenant\nmetadata: {name: from-stdin}\n"))
	require.NoError(t, err)
	require.Len(t, docs, 3)
	assert.Equal(t, "stdin (document 1, line 1)", docs[0].Source)

	_, err = readManifests(nil, nil)
	assert.ErrorContains(t, err, "-f")
	_, err = readManifests([]string{"testdata/nope.yaml"}, nil)
	assert.Error(t, err)
	_, err = readManifests([]string{"-"}, strings.NewReader("---\n"))
	assert.ErrorContains(t, err, "no objects")
}

func TestSetMeta(t *testing.T) {
	docs, err := parseDocuments(strings.NewReader("kind: ng\nmetadata: {name: a, resourceVersion: '3', labels: {x: y}}\nspec: {count: 1}\nextra: kept\n"), "in")
	require.NoError(t, err)
	d := docs[0]
	b, err := d.setMeta("NodeGroup", "rezuscloud.io/v1", map[string]any{"tenant": "acme", "resourceVersion": nil})
	require.NoError(t, err)
	assert.JSONEq(t, `{"apiVersion":"rezuscloud.io/v1","kind":"NodeGroup","metadata":{"name":"a","tenant":"acme","labels":{"x":"y"}},"spec":{"count":1},"extra":"kept"}`, string(b))
	assert.True(t, d.hasMeta("labels"))
	assert.False(t, d.hasMeta("finalizers"))
}

// toYAML keeps key order, quotes strings that would read back as other
// types, writes multi-line strings as blocks, and reads back to the same JSON.
func TestToYAMLRoundTrip(t *testing.T) {
	in := `{"z":1,"a":{"s":"true","n":"123","e":"","null":null,"f":1.5,"big":12345678901234567890,"b":false,
		"multi":"line one\nline two\n","list":[1,"x",{"k":"v"}],"empty":{},"emptyList":[]}}`
	y, err := toYAML([]byte(in))
	require.NoError(t, err)
	golden(t, "roundtrip.yaml", string(y))
	assert.True(t, strings.Index(string(y), "z:") < strings.Index(string(y), "a:"), "key order is kept")

	docs, err := parseDocuments(strings.NewReader("kind: X\nmetadata: {name: n}\nbody:\n"+indent(string(y))), "rt")
	require.NoError(t, err)
	var got struct {
		Body json.RawMessage `json:"body"`
	}
	require.NoError(t, json.Unmarshal(docs[0].Raw, &got))
	var want, have any
	require.NoError(t, json.Unmarshal([]byte(in), &want))
	require.NoError(t, json.Unmarshal(got.Body, &have))
	assert.Equal(t, want, have)
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("  " + l)
		}
	}
	return b.String()
}
