package domain

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// handJoinedPath matches a cause's field path built by joining strings:
// `Field: f + ".x"`, `Field: "spec." + name`, `Field: fmt.Sprintf(...)`,
// `f+".x"` handed to a validator, and `fmt.Sprintf("%s[%d]", f, i)`.
// Validators take a *field.Path and build paths with Child, Index and Key;
// a cause's Field is set from its String().
var handJoinedPath = regexp.MustCompile(`Field:\s*(\w+\s*\+|"[^"]*"\s*\+|fmt\.Sprintf)|fmt\.Sprintf\("%s[.\[]|\b(f|p|bf|fp|ff|field)\s*\+\s*"[.\[]`)

// TestNoHandJoinedFieldPaths fails when a validator in domain builds a cause's
// field path by joining strings again instead of through field.Path. The
// strict JSON decoder (strictjson.go, strictpath.go) is not a validator: it
// rewrites the decoder's own paths, whose root may be empty, and the pattern
// does not reach it.
func TestNoHandJoinedFieldPaths(t *testing.T) {
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var found []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			if handJoinedPath.MatchString(line) {
				found = append(found, name+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
			}
		}
	}
	require.Empty(t, found, "build field paths with k8s.io/apimachinery/pkg/util/validation/field (p.Child, p.Index, p.Key; Field: p.String())")
}

// TestHandJoinedPathPattern keeps the lint honest: it matches the shapes the
// field.Path move removed and none of the ones that replaced them.
func TestHandJoinedPathPattern(t *testing.T) {
	for _, bad := range []string{
		`causes = append(causes, Cause{Field: f + ".count", Type: CauseInvalid})`,
		`return []Cause{{Field: "spec.config." + k, Type: CauseInvalid}}`,
		`causes = append(causes, Cause{Field: fmt.Sprintf("%s[%d]", f, n-1)})`,
		`p := fmt.Sprintf("%s.taints[%d]", f, i)`,
		`causes = append(causes, s.Schematic.Validate(f+".schematic")...)`,
		`bf := f + "[" + strconv.Itoa(i) + "]"`,
	} {
		require.True(t, handJoinedPath.MatchString(bad), bad)
	}
	for _, good := range []string{
		`causes = append(causes, Cause{Field: f.Child("count").String(), Type: CauseInvalid})`,
		`p := f.Child("taints").Index(i)`,
		`return []Cause{{Field: "metadata.name", Type: CauseRequired}}`,
		`Message: fmt.Sprintf("%q is not a duration such as 5m or 90s", v)`,
		`return SubjectPrefix + "." + kind.Subject + "." + scope + "." + name`,
	} {
		require.False(t, handJoinedPath.MatchString(good), good)
	}
}

// TestFieldPathText pins the text clients match on where field.Path's
// rendering could have differed from the hand-joined one: map keys in
// brackets, unquoted, and a patch nested in a rollout.
func TestFieldPathText(t *testing.T) {
	fields := func(cs []Cause) []string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = c.Field
		}
		return out
	}
	p := ProviderSpec{Type: ProviderModule, Module: &ModuleSource{Files: map[string]string{"../x.tf": ""}}}
	require.Contains(t, fields(p.Validate("spec")), "spec.module.files[../x.tf]")

	r := RolloutSpec{Change: RolloutChange{ConfigPatch: &RolloutConfigPatch{Name: "p", Spec: ConfigPatchSpec{
		Target: PatchTarget{Kind: TargetAll}, Format: PatchJSON6902, Patch: `[{"op":"nope","path":"/x"}]`}}}}
	r.Default()
	require.Contains(t, fields(r.Validate("spec")), "spec.change.configPatch.spec.patch[0].op")

	labels := map[string]string{"a b": "ok"}
	require.Equal(t, []string{"spec.labels[a b]"}, fields(ValidateLabels(labels, field.NewPath("spec", "labels"))))
}
