package providers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// deepParens is the key of issue 27's finding 1: a template of n nested
// parentheses, which overflowed the parser's stack and killed the server.
func deepParens(n int) string {
	return "${" + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) + "}"
}

// TestModuleProviderConfigKeysAreBounded: a node group's providerConfig key
// of 400,000 nested parentheses (accepted before, then fatal to the applying
// replica at every restart) is refused at write time with the field at
// fault; every key at any depth must be a short identifier.
func TestModuleProviderConfigKeysAreBounded(t *testing.T) {
	key := func(k string) string { b, _ := json.Marshal(k); return string(b) }
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"identifiers", `{"server_type":"cx22","labels":{"team-a":"x","b_2":[{"k":1}]}}`, nil},
		{"the attack", `{` + key(deepParens(400000)) + `:1}`, []string{`spec.providerConfig: key "${((((((((((((((((((((((((((((((((((((((…": keys must be identifiers`}},
		{"a template key", `{"${file(\"/etc/passwd\")}":1}`, []string{`spec.providerConfig: key "${file(\"/etc/passwd\")}": keys must be identifiers`}},
		{"nested", `{"labels":{"ok":{"%{if true}x%{endif}":1}}}`, []string{`spec.providerConfig.labels.ok: key "%{if true}x%{endif}": keys must be identifiers`}},
		{"in a list", `{"disks":[{"size":1},{"a b":2}]}`, []string{`spec.providerConfig.disks[1]: key "a b": keys must be identifiers`}},
		{"too long", `{"` + strings.Repeat("a", 65) + `":1}`, []string{`spec.providerConfig: key "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…": keys must be identifiers`}},
		{"empty", `{"":1}`, []string{`spec.providerConfig: key "": keys must be identifiers`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, causes := moduleType.gen.decodeGroupConfig(json.RawMessage(tc.config))
			got := causeStrings(causes)
			require.Len(t, got, len(tc.want), "%v", got)
			for i, w := range tc.want {
				require.True(t, strings.HasPrefix(got[i], w), "%q does not start with %q", got[i], w)
			}
		})
	}
}

// TestEscapedKeysAreNotEvaluated: keys of a module argument are escaped as
// its values are, so a key reaches tofu as text, not as a template.
func TestEscapedKeysAreNotEvaluated(t *testing.T) {
	v, err := jsonSyntaxValue(json.RawMessage(`{"${x}":{"%{y}":"${z}"}}`))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"$${x}": map[string]any{"%%{y}": "$${z}"}}, v)
}

// TestNestingIsBoundedBeforeAnyParse: text nested beyond MaxHCLNesting is
// refused with a diagnostic before a parser sees it, in a module file (1 MiB
// of parentheses in a locals value crashed the server at write time), in a
// template and in JSON; nesting inside JSON strings counts as the template
// the string is, brackets in comments and in an HCL string's text not at all.
func TestNestingIsBoundedBeforeAnyParse(t *testing.T) {
	deep := "locals {\n  x = " + strings.Repeat("(", 520000) + "1" + strings.Repeat(")", 520000) + "\n}\n"
	_, causes := ModuleChecker{}.Check(emulatedModuleSpec(map[string]string{"deep.tf": deep}))
	require.NotEmpty(t, causes)
	require.Equal(t, "spec.module.files[deep.tf]", causes[0].Field)
	require.Contains(t, causes[0].Message, "the text nests 520001 deep (brackets, templates, directives and operators); at most 256")

	deepJSON := `{"locals":{"x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}}`
	_, causes = ModuleChecker{}.Check(emulatedModuleSpec(map[string]string{"deep.tf.json": deepJSON}))
	require.NotEmpty(t, causes)
	require.Contains(t, causes[0].Message, "brackets nest 302 deep")

	require.Equal(t, 1, jsonDepth([]byte(`{"a":"((((((([[[[{{{{\"}}}"}`)))
	require.Equal(t, 0, jsonTemplateDepth([]byte(`{"a":"((((((([[[[{{{{\"}}}"}`)), "no interpolation: text")
	require.Equal(t, 4, jsonTemplateDepth([]byte(`{"a":"${(((1)))}"}`)))
	require.Equal(t, 4, jsonTemplateDepth([]byte(`{"\u0024{(((1)))}":1}`)), "an escaped key is a template too")
	require.Equal(t, 3, hclDepth([]byte(`a = ([{x = 1}])`), syntaxConfig))
	require.Equal(t, 4, hclDepth([]byte(`a = (b[c{x = 1}])`), syntaxConfig), "an index is a level of its own")
	require.Equal(t, 1, hclDepth([]byte(`a = ")))((("`), syntaxConfig), "a string's text does not count")
	require.Equal(t, 0, hclDepth([]byte("# ((((((\n"), syntaxConfig), "nor a comment")
	require.Equal(t, 1, hclDepth([]byte(`)))(`), syntaxConfig), "unbalanced closers do not go below zero")

	c := &tfChecker{}
	err := c.template(deepParens(MaxHCLNesting+1), false)
	require.ErrorContains(t, err, "at most 256")
	require.NoError(t, c.template(deepParens(20), false))
}

// TestEveryRecursionIsBoundedBeforeAnyParse: issue 42, finding 6. 1 MiB of
// `!` in a module crashed the server at write time (a fatal stack overflow
// in hclsyntax's unary-operator parser, which no recover catches): the
// bound counted brackets only. Every construct hclsyntax's parser recurses
// on, or builds a tree as deep as its text of (see hclDepth), is a
// diagnostic now. A construct whose parse overflowed the stack on the old
// code is 1 MiB deep here (the test process died of it); one the old code
// took without a diagnostic but without a crash either is 4 times the bound
// deep (it failed the test); one the old bracket count already bounded is
// 4 times the bound deep too (TestNestingIsBoundedBeforeAnyParse replays
// its 1 MiB attack).
func TestEveryRecursionIsBoundedBeforeAnyParse(t *testing.T) {
	const mib = 1 << 20
	rep := func(s string, n int) string { return strings.Repeat(s, n) }
	big := func(s string) int { return mib / len(s) }
	const few = 4 * MaxHCLNesting
	local := func(expr string) map[string]string {
		return map[string]string{"deep.tf": "locals {\n  x = " + expr + "\n}\n"}
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
	}{
		// The old code crashed.
		{"unary !", local(rep("!", mib) + "true")},
		{"unary -", local(rep("-", mib) + "1")},
		{"full splats", local("a" + rep("[*]", big("[*]")))},
		{"splats and attributes", local("a" + rep("[*].b", big("[*].b")))},
		// The old code took them without a diagnostic.
		{"conditional, false results", local(rep("true ? 1 : ", few) + "1")},
		{"conditional, true results", local(rep("true ? ", few) + "1" + rep(" : 1", few))},
		{"binary operators", local(rep("1 + ", few) + "1")},
		{"logical operators", local(rep("true && ", few) + "true")},
		{"indexes", local("a" + rep("[b]", few))},
		{"template if directives", local(`"` + rep("%{if true}", few) + rep("%{endif}", few) + `"`)},
		{"template for directives", local(`"` + rep("%{for x in y}", few) + rep("%{endfor}", few) + `"`)},
		{"unary ! in a JSON string", map[string]string{"deep.tf.json": `{"locals": {"x": "${` + rep("!", few) + `true}"}}`}},
		// The old code's bracket count bounded them.
		{"parentheses", local(rep("(", few) + "1" + rep(")", few))},
		{"function call arguments", local(rep("f(", few) + "1" + rep(")", few))},
		{"tuples", local(rep("[", few) + rep("]", few))},
		{"objects", local(rep("{a=", few) + "1" + rep("}", few))},
		{"for expressions", local(rep("[for x in ", few) + "y" + rep(" : x]", few))},
		{"nested blocks", map[string]string{"deep.tf": rep("a {\n", few) + rep("}\n", few)}},
		{"template interpolations", local(rep(`"${`, few) + "1" + rep(`}"`, few))},
		{"nested heredocs", local(rep("<<E\n${", few) + "1" + rep("}\nE\n", few))},
		{"JSON arrays", map[string]string{"deep.tf.json": `{"locals": {"x": ` + rep("[", few) + rep("]", few) + `}}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, causes := ModuleChecker{}.Check(emulatedModuleSpec(tc.files))
			var msgs []string
			for _, c := range causes {
				msgs = append(msgs, c.Field+": "+c.Message)
			}
			require.NotEmpty(t, causes)
			require.Regexp(t, `nests? \d+ deep`, strings.Join(msgs, "\n"))
			for name := range tc.files {
				require.Equal(t, domain.ModuleFileField(field.NewPath("spec"), name), causes[0].Field)
			}
		})
	}
	t.Run("a generated file's template", func(t *testing.T) {
		c := &tfChecker{}
		require.ErrorContains(t, c.template("${"+rep("!", mib)+"true}", false), "at most 256")
		require.ErrorContains(t, c.template(rep("%{if true}", few)+rep("%{endif}", few), false), "at most 256")
	})
}

// TestRealModulesAreWithinTheBound: the bound leaves room for real modules:
// the built-in module, every example and test module measure far below it.
func TestRealModulesAreWithinTheBound(t *testing.T) {
	var paths []string
	for _, glob := range []string{"modules/*/*.tf", "../examples/*/*/*.tf", "../examples/*/*.tf", "../examples/*/*/*.tf.json",
		"testdata/*.tf.json*", "../internal/*/testdata/*.tf"} {
		m, err := filepath.Glob(glob)
		require.NoError(t, err)
		paths = append(paths, m...)
	}
	require.NotEmpty(t, paths)
	for _, p := range paths {
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		d := hclDepth(src, syntaxConfig)
		if strings.Contains(p, ".json") {
			d = max(jsonDepth(src), jsonTemplateDepth(src))
		}
		require.Less(t, d, MaxHCLNesting/4, "%s nests %d deep", p, d)
	}
}

// TestParsePanicsAreDiagnostics: a parser that panics yields an error
// diagnostic, never a crash.
func TestParsePanicsAreDiagnostics(t *testing.T) {
	_, diags := parseGuarded([]byte("x"), "f.tf", syntaxConfig, func() (*hcl.File, hcl.Diagnostics) { panic("boom") })
	require.True(t, diags.HasErrors())
	require.Contains(t, diags.Error(), "the parser failed on this text: boom")
	f, diags := parseGuarded([]byte("a = 1\n"), "f.tf", syntaxConfig, func() (*hcl.File, hcl.Diagnostics) {
		return hclsyntax.ParseConfig([]byte("a = 1\n"), "f.tf", hcl.InitialPos)
	})
	require.False(t, diags.HasErrors())
	require.NotNil(t, f)
}

// provisionerPlaces are issue 27's finding 2 and its neighbours: a
// provisioner in each block that may hold one, in both syntaxes.
var provisionerPlaces = map[string]map[string]string{
	"resource": {"x.tf": "resource \"terraform_data\" \"x\" {\n  provisioner \"local-exec\" {\n    command = \"id\"\n  }\n}\n"},
	"removed":  {"x.tf": "removed {\n  from = terraform_data.gone\n  lifecycle {\n    destroy = true\n  }\n  provisioner \"local-exec\" {\n    when    = destroy\n    command = \"id > /tmp/pwned\"\n  }\n}\n"},
	"removed, JSON": {"x.tf.json": `{"removed":[{"from":"terraform_data.gone","lifecycle":[{"destroy":true}],
			"provisioner":[{"local-exec":{"when":"destroy","command":"id > /tmp/pwned"}}]}]}`},
	"resource, JSON": {"x.tf.json": `{"resource":{"terraform_data":{"x":{"provisioner":{"remote-exec":{"inline":["id"]}}}}}}`},
	"data":           {"x.tf": "data \"terraform_data\" \"x\" {\n  provisioner \"file\" {\n    source = \"/etc/shadow\"\n    destination = \"/tmp/x\"\n  }\n}\n"},
	"dynamic":        {"x.tf": "resource \"terraform_data\" \"x\" {\n  dynamic \"provisioner\" {\n    for_each = [1]\n    content {}\n  }\n}\n"},
}

// TestProvisionersAreRefusedWherever: issue 27's finding 2 ran a `removed`
// block's destroy-time local-exec as root with exec off. Every provisioner
// is refused, whatever block holds it, in both syntaxes, unless exec is
// allowed.
func TestProvisionersAreRefusedWherever(t *testing.T) {
	mirror := map[string]bool{"registry.opentofu.org/rezuscloud/emulated": true}
	for name, files := range provisionerPlaces {
		t.Run(name, func(t *testing.T) {
			_, causes := ModuleChecker{Available: mirror}.Check(emulatedModuleSpec(files))
			var forbidden []domain.Cause
			for _, c := range causes {
				if c.Type == domain.CauseForbidden {
					forbidden = append(forbidden, c)
				}
			}
			require.Len(t, forbidden, 1, "%v", causes)
			require.Contains(t, forbidden[0].Message, "provisioner is not allowed")
			for f := range files {
				require.Equal(t, "spec.module.files["+f+"]", forbidden[0].Field)
			}
			_, causes = ModuleChecker{Available: mirror, AllowExec: true}.Check(emulatedModuleSpec(files))
			for _, c := range causes {
				require.NotEqual(t, domain.CauseForbidden, c.Type, "--allow-module-exec: %v", c)
			}
		})
	}
}

// TestGenerateRefusesATenantOutsideTheProviderSelector: a Provider narrowed
// to other tenants after a group was written is refused at the next apply.
func TestGenerateRefusesATenantOutsideTheProviderSelector(t *testing.T) {
	tn := genTenant("demo", "")
	tn.Metadata.Labels = map[string]string{"team": "b"}
	p := genProvider("p", domain.ProviderEmulated, cfgEmulated)
	p.Spec.TenantSelector = "team=a"
	in := GenerateInput{Tenant: tn, PlaceholderEndpoint: true, Providers: map[string]*domain.Provider{"p": p},
		Groups: []GroupInput{genGroup(tn, "cp", domain.RoleControlPlane, "p", 1, `{}`)}}
	_, err := Generate(in)
	require.True(t, domain.IsInvalid(err), "%v", err)
	require.ErrorContains(t, err, `provider "p" serves only tenants matching "team=a"; tenant demo does not`)
	tn.Metadata.Labels["team"] = "a"
	_, err = Generate(in)
	require.NoError(t, err)
}
