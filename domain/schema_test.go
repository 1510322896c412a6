package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite testdata/schema/*.level1.json from DownConvert")

// schemaFixture reads testdata/schema/<name>: an object as the API shows it
// (indented), with spec and status back in their canonical compact form.
func schemaFixture(t *testing.T, name string) *Object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "schema", name))
	require.NoError(t, err)
	obj := &Object{}
	require.NoError(t, json.Unmarshal(raw, obj))
	for _, part := range []*json.RawMessage{&obj.Spec, &obj.Status} {
		if len(*part) == 0 {
			continue
		}
		var b bytes.Buffer
		require.NoError(t, json.Compact(&b, *part))
		*part = b.Bytes()
	}
	return obj
}

func writeSchemaFixture(t *testing.T, name string, obj *Object) {
	t.Helper()
	raw, err := json.MarshalIndent(obj, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("testdata", "schema", name), append(raw, '\n'), 0o644))
}

// canonical asserts the kind's normaliser takes part as it is: valid, and
// nothing it would change.
func canonical(t *testing.T, kind *KindInfo, part string, raw json.RawMessage) {
	t.Helper()
	if len(raw) == 0 {
		return
	}
	norm := kind.NormalizeSpec
	if part == "status" {
		norm = kind.NormalizeStatus
	}
	got, causes := norm(raw)
	require.Empty(t, causes, "%s %s", kind.Kind, part)
	require.JSONEq(t, string(raw), string(got), "%s %s is not canonical", kind.Kind, part)
	require.Equal(t, string(got), string(raw), "%s %s: same members, another order or spelling", kind.Kind, part)
}

// hasPath reports whether the JSON document holds a member at path ("[]":
// any element of an array).
func hasPath(t *testing.T, raw json.RawMessage, path []string) bool {
	t.Helper()
	_, found, err := dropPath(raw, path)
	require.NoError(t, err)
	return found
}

// Every kind issue 43 gave a field is taken from level 2 to level 1: the
// result is the golden level-1 record (the fields dropped, every other
// byte and the order kept), the kind's normaliser reads it unchanged, and
// none of the level-2 fields is left. The level-1 goldens were also read
// by 0.1.0's strict normalisers (commit 2817901), which refuse any field
// they do not know.
func TestDownConvertToLevel1(t *testing.T) {
	for _, kind := range []string{"Upgrade", "Machine", "Restore", "Remediation", "Rollout", "Provider", "Apply"} {
		t.Run(kind, func(t *testing.T) {
			k := MustKind(kind)
			in := schemaFixture(t, kind+".level2.json")
			before := in.DeepCopy()
			canonical(t, k, "spec", in.Spec)
			canonical(t, k, "status", in.Status)
			fields := levelFields[2]
			n := 0
			for _, f := range fields {
				if f.kind == kind {
					n++
					raw := in.Spec
					if f.part == "status" {
						raw = in.Status
					}
					require.True(t, hasPath(t, raw, f.path), "the level-2 fixture has %s.%s", f.part, fieldPath(f.path))
				}
			}
			require.NotZero(t, n)

			out, err := DownConvert(kind, in, 1)
			require.NoError(t, err)
			require.Equal(t, before, in, "DownConvert changed its input")
			if *updateSchema {
				writeSchemaFixture(t, kind+".level1.json", out)
			}
			want := schemaFixture(t, kind+".level1.json")
			require.Equal(t, string(want.Spec), string(out.Spec))
			require.Equal(t, string(want.Status), string(out.Status))
			require.Equal(t, want.Metadata, out.Metadata)
			canonical(t, k, "spec", out.Spec)
			canonical(t, k, "status", out.Status)
			for _, f := range fields {
				if f.kind == kind {
					raw := out.Spec
					if f.part == "status" {
						raw = out.Status
					}
					require.False(t, hasPath(t, raw, f.path), "%s.%s is left", f.part, fieldPath(f.path))
				}
			}

			again, err := DownConvert(kind, out, 1)
			require.NoError(t, err)
			require.Same(t, out, again, "a level-1 record converts to itself, without a copy")
			same, err := DownConvert(kind, in, SchemaLevel)
			require.NoError(t, err)
			require.Same(t, in, same, "the newest level is written as it is")
		})
	}
}

// Kinds and records the newer fields do not touch are written as they are.
func TestDownConvertLeavesOthers(t *testing.T) {
	tests := []struct {
		name string
		obj  *Object
	}{
		{"other kind", &Object{Kind: "Tenant", Spec: json.RawMessage(`{"deadlines":{"x":1},"versions":[1]}`)}},
		{"no new fields", &Object{Kind: "Upgrade", Spec: json.RawMessage(`{"talosVersion":"v1.13.1","maxParallelism":1}`),
			Status: json.RawMessage(`{"phase":"Running","machines":[{"name":"a","wait":null}]}`)}},
		{"null machines", &Object{Kind: "Upgrade", Status: json.RawMessage(`{"phase":"Pending","machines":null}`)}},
		{"no status", &Object{Kind: "Machine", Spec: json.RawMessage(`{"nodeGroup":"cp"}`)}},
		{"nil", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := DownConvert(kindOf(tt.obj), tt.obj, 1)
			require.NoError(t, err)
			if tt.name == "no new fields" {
				// "wait":null is a member: a level-1 reader strict on
				// unknown fields would refuse it, so it goes too.
				require.JSONEq(t, `{"phase":"Running","machines":[{"name":"a"}]}`, string(out.Status))
				return
			}
			require.Same(t, tt.obj, out)
		})
	}
}

func kindOf(o *Object) string {
	if o == nil {
		return "Upgrade"
	}
	return o.Kind
}

// dropPath keeps every other member's bytes and the order.
func TestDropPath(t *testing.T) {
	tests := []struct {
		name, in string
		path     []string
		want     string
		changed  bool
	}{
		{"top", `{"a":1,"b":{"c":2},"z":"<&>"}`, []string{"b"}, `{"a":1,"z":"<&>"}`, true},
		{"nested", `{"b":{"x":1,"c":2,"y":[3]},"a":1}`, []string{"b", "c"}, `{"b":{"x":1,"y":[3]},"a":1}`, true},
		{"each element", `{"m":[{"w":1,"n":"a"},{"n":"b"},{"n":"c","w":{}}]}`, []string{"m", "[]", "w"}, `{"m":[{"n":"a"},{"n":"b"},{"n":"c"}]}`, true},
		{"absent", `{"a":1}`, []string{"b"}, `{"a":1}`, false},
		{"not an object", `[1,2]`, []string{"b"}, `[1,2]`, false},
		{"not an array", `{"m":{"w":1}}`, []string{"m", "[]", "w"}, `{"m":{"w":1}}`, false},
		{"null", `null`, []string{"b"}, `null`, false},
		{"empty", ``, []string{"b"}, ``, false},
		{"escaped key", `{"\u0062":1,"a":2}`, []string{"b"}, `{"a":2}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, err := dropPath(json.RawMessage(tt.in), tt.path)
			require.NoError(t, err)
			require.Equal(t, tt.changed, changed)
			require.Equal(t, tt.want, string(got))
		})
	}
	_, _, err := dropPath(json.RawMessage(`{"a":`), []string{"a"})
	require.Error(t, err)
}

// Level 1 goes up to level 2 unchanged today; the chain of up-steps runs
// from the record's level, and a level above this build's is refused.
func TestUpConvert(t *testing.T) {
	in := schemaFixture(t, "Upgrade.level1.json")
	out, err := UpConvert("Upgrade", in, 0)
	require.NoError(t, err)
	require.Same(t, in, out, "level 1 reads as level 2 as it is")
	out, err = UpConvert("Upgrade", in, 2)
	require.NoError(t, err)
	require.Same(t, in, out)

	_, err = UpConvert("Upgrade", in, SchemaLevel+1)
	require.ErrorIs(t, err, ErrNewerSchema)
	_, err = DownConvert("Upgrade", in, SchemaLevel+1)
	require.ErrorIs(t, err, ErrNewerSchema)

	// The hook: a step registered for level 1 runs for a level-1 record
	// (and not for a level-2 one), on a copy.
	saved := upSteps[1]
	t.Cleanup(func() { upSteps[1] = saved })
	upSteps[1] = func(obj *Object) (*Object, error) {
		c := obj.DeepCopy()
		c.Metadata.Labels = map[string]string{"converted": "1to2"}
		return c, nil
	}
	out, err = UpConvert("Upgrade", in, 1)
	require.NoError(t, err)
	require.Equal(t, "1to2", out.Metadata.Labels["converted"])
	require.Nil(t, in.Metadata.Labels, "the input is not changed")
	out, err = UpConvert("Upgrade", in, 2)
	require.NoError(t, err)
	require.Same(t, in, out)

	upSteps[1] = func(*Object) (*Object, error) { return nil, errors.New("bad record") }
	_, err = UpConvert("Upgrade", in, 1)
	require.ErrorContains(t, err, "converting Upgrade from schema level 1 to 2: bad record")
}

func TestEventLevel(t *testing.T) {
	for recorded, want := range map[int]int{0: 1, -1: 1, 1: 1, 2: 2, 3: 3} {
		require.Equal(t, want, (&Event{Schema: recorded}).Level())
	}
	// Level 1 is written as releases before levels wrote it: no member.
	raw, err := json.Marshal(&Event{Type: "X", Object: &Object{}})
	require.NoError(t, err)
	require.NotContains(t, string(raw), "schema")
}

func TestNewerSchemaFields(t *testing.T) {
	require.Equal(t, []string{"spec.deadlines", "status.machines[].wait", "status.machines[].replica"}, NewerSchemaFields("Upgrade", 1))
	require.Empty(t, NewerSchemaFields("Upgrade", 2))
	require.Empty(t, NewerSchemaFields("Tenant", 1))
}

func TestNewNewerSchema(t *testing.T) {
	err := NewNewerSchema("Upgrade", "up-1", 3, "0.2.0")
	require.True(t, IsConflict(err))
	require.True(t, IsNewerSchema(err))
	require.False(t, IsNewerSchema(NewConflict("Upgrade", "up-1", "stale")))
	require.Equal(t, `operation cannot be fulfilled on upgrade "up-1": written by a newer RezusCloud (schema 3); `+
		`this replica runs 0.2.0 (schema 2): the work waits for a replica that reads it`, err.Error())
	st := StatusOf(err)
	require.Equal(t, 409, st.Code)
	require.Equal(t, "schema", st.Details.Causes[0].Field)
}

// A node group's list of machines cannot be dropped by a rewrite at level
// 1 (a 0.1.0 replica still runs): a removed machine would come back, and
// the next would take a used name. The write is refused with a 503 naming
// the field, until every replica reads level 2; a group without the
// fields is written at level 1 as it is.
func TestDownConvertRefusesNodeGroupMembers(t *testing.T) {
	k := MustKind("NodeGroup")
	in := schemaFixture(t, "NodeGroup.level2.json")
	canonical(t, k, "spec", in.Spec)
	canonical(t, k, "status", in.Status)
	_, err := DownConvert("NodeGroup", in, 1)
	var de *Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, ReasonServiceUnavailable, de.Reason)
	require.Positive(t, de.RetryAfterSeconds)
	require.Equal(t, "spec.autoscaling", de.Causes[0].Field)

	plain := in.DeepCopy()
	plain.Spec = json.RawMessage(`{"role":"worker","count":2,"provider":"emu","updateStrategy":{"maxParallelism":1}}`)
	out, err := DownConvert("NodeGroup", plain, 1)
	require.NoError(t, err)
	require.Same(t, plain, out)
	require.Equal(t, []string{"spec.autoscaling", "spec.members"}, NewerSchemaFields("NodeGroup", 1))
}
