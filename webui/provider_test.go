package webui

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// hostileMain is a module file whose text would break out of the page if it
// were not escaped: a closing tag in a comment, markup in a string, a
// quote-and-attribute in a heredoc. (Its HCL and the module contract are
// fine, so the API takes it; tofu validate would not.)
const hostileMain = `# </td></tr></table><script>alert("comment")</script>
resource "emulated_machine" "machine" {
  for_each = var.machines
  name     = "<img src=x onerror=alert(1)>-${each.key}"
  cluster  = 3
  user_data = <<EOT
" onmouseover="alert(2)
EOT
}
`

// contractFiles are the files a module needs besides its main.tf to pass
// the API's write-time checks: the machines input and output.
var contractFiles = map[string]string{
	"variables.tf": "variable \"machines\" {\n  type = map(any)\n}\n",
	"outputs.tf":   "output \"machines\" {\n  value = {}\n}\n",
}

// createModuleProvider creates a module provider of main.tf and contractFiles.
func createModuleProvider(t *testing.T, s *uiStack, name, main string) {
	t.Helper()
	files := map[string]string{"main.tf": main}
	for n, text := range contractFiles {
		files[n] = text
	}
	s.create("/providers", map[string]any{"apiVersion": domain.APIVersion, "kind": "Provider",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"type": domain.ProviderModule, "module": map[string]any{"files": files}}})
}

func setValidated(t *testing.T, s *uiStack, name string, cond map[string]any) {
	t.Helper()
	cond["type"] = domain.ConditionValidated
	if _, ok := cond["lastTransitionTime"]; !ok {
		cond["lastTransitionTime"] = "2026-05-01T11:00:00Z"
	}
	s.apiCall(http.MethodPatch, "/providers/"+name+"/status", map[string]any{"status": map[string]any{"conditions": []any{cond}}}, nil)
}

func TestModuleProviderPage(t *testing.T) {
	s := newUIStack(t)
	createModuleProvider(t, s, "lab", hostileMain)
	setValidated(t, s, "lab", map[string]any{"status": "False", "reason": domain.ReasonModuleInvalid, "observedGeneration": 1,
		"message": "main.tf:4:14: Invalid reference: <b>not markup</b>\n" +
			"variables.tf:99:1: Out of range: a line the file does not have\n" +
			"Error: no location at all"})
	b := s.signIn("viewer", "view")

	list := b.get("/ui/settings/providers")
	require.Equal(t, http.StatusOK, list.Code, list.Body)
	require.Contains(t, list.Body, `href="/ui/settings/providers/lab" data-testid="provider-link"`)
	require.Contains(t, list.Body, `data-validated="False"`)

	page := b.get("/ui/settings/providers/lab")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	body := page.Body

	// Everything from the files and the condition is escaped.
	require.NotContains(t, body, "<script>alert")
	require.NotContains(t, body, "<img src=x")
	require.NotContains(t, body, "<b>not markup</b>")
	require.NotContains(t, body, `" onmouseover="alert(2)`)
	require.Contains(t, body, "&lt;/td&gt;&lt;/tr&gt;&lt;/table&gt;&lt;script&gt;alert(&#34;comment&#34;)&lt;/script&gt;")
	require.Contains(t, body, "&lt;b&gt;not markup&lt;/b&gt;")

	// Highlighted spans: comment, keyword, strings with a template, number, heredoc.
	require.Contains(t, body, `<span class="hl-comment"># &lt;/td&gt;`)
	require.Contains(t, body, `<span class="hl-keyword">resource</span>`)
	require.Contains(t, body, `<span class="hl-string">&#34;emulated_machine&#34;</span>`)
	require.Contains(t, body, `<span class="hl-string">&#34;&lt;img src=x onerror=alert(1)&gt;-</span><span class="hl-template">${</span>each.key<span class="hl-template">}</span><span class="hl-string">&#34;</span>`)
	require.Contains(t, body, `<span class="hl-number">3</span>`)
	require.Contains(t, body, `<span class="hl-string">&lt;&lt;EOT</span>`)
	require.Contains(t, body, `<span class="hl-string">&#34; onmouseover=&#34;alert(2)</span>`)

	// Line anchors, and the lines the diagnostics name marked and linked.
	require.Contains(t, body, `<section id="file-main.tf"`)
	require.Contains(t, body, `id="file-main.tf-L1"`)
	require.Contains(t, body, `href="#file-main.tf-L9"`)
	require.NotContains(t, body, `id="file-main.tf-L10"`, "a file ending in a newline has no empty last line")
	require.Contains(t, body, `id="file-variables.tf-L3"`)
	require.Regexp(t, `<tr id="file-main.tf-L4" class="code-row code-row-marked" data-marked title="Invalid reference: &lt;b&gt;not markup&lt;/b&gt;">`, body)
	require.Regexp(t, `<tr id="file-main.tf-L3" class="code-row">`, body)

	// The condition: status, reason, diagnostics; only real lines are links.
	require.Contains(t, body, `data-testid="provider-validation" data-condition="Validated"`)
	require.Contains(t, body, `data-phase="False"`)
	require.Contains(t, body, `<span class="font-medium" data-testid="validated-reason">Invalid</span>`)
	require.Contains(t, body, "tofu validate refuses the module.")
	require.Contains(t, body, `<a class="text-indigo-700 hover:underline font-semibold" href="#file-main.tf-L4">main.tf:4:14</a>:`)
	require.Contains(t, body, `<span class="font-semibold">variables.tf:99:1</span>:`)
	require.NotContains(t, body, `href="#file-variables.tf-L99"`)
	require.Contains(t, body, ">1 diagnostic</span>")
	require.Contains(t, body, ">9 lines</span>")
	require.Contains(t, body, "Error: no location at all")
	require.Equal(t, 3, strings.Count(body, "data-diagnostic>"))

	require.NotContains(t, body, "data-mutating", "the page is read-only")

	// Live: the page opens its stream with what it shows, so nothing is sent
	// again until the provider changes.
	require.Contains(t, body, `sse-connect="/ui/live/settings/providers/lab?seen=provider%3A`)
	require.Contains(t, body, `sse-swap="provider-files"`)
}

func TestModuleProviderPageStates(t *testing.T) {
	s := newUIStack(t)
	createModuleProvider(t, s, "lab", "locals {\n  a = 1\n}\n")
	b := s.signIn("viewer", "view")

	page := b.get("/ui/settings/providers/lab")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.Contains(t, page.Body, "Not checked yet")

	setValidated(t, s, "lab", map[string]any{"status": "Unknown", "reason": domain.ReasonModulePending, "observedGeneration": 1, "message": "tofu validate is running"})
	page = b.get("/ui/settings/providers/lab")
	require.Contains(t, page.Body, "tofu validate is checking the module.")
	require.Contains(t, page.Body, `<p class="text-slate-500" data-testid="validated-note">tofu validate is running</p>`, "a message that is no verdict")
	require.NotContains(t, page.Body, "data-diagnostic")

	setValidated(t, s, "lab", map[string]any{"status": "True", "reason": domain.ReasonModuleValid, "observedGeneration": 1})
	page = b.get("/ui/settings/providers/lab")
	require.Contains(t, page.Body, "tofu validate accepts the module.")
	require.Contains(t, page.Body, `data-phase="True"`)
	require.NotContains(t, page.Body, "data-diagnostic")

	// A verdict on an older spec: shown, said to be old, not linked.
	setValidated(t, s, "lab", map[string]any{"status": "False", "reason": domain.ReasonModuleInvalid, "observedGeneration": 1, "message": "main.tf:2:3: Unsupported argument: a"})
	s.apiCall(http.MethodPatch, "/providers/lab", map[string]any{"spec": map[string]any{"module": map[string]any{"files": map[string]any{"main.tf": "locals {\n  b = 2\n}\n"}}}}, nil)
	page = b.get("/ui/settings/providers/lab")
	require.Contains(t, page.Body, `data-testid="validated-stale"`)
	require.Contains(t, page.Body, `<span class="font-semibold">main.tf:2:3</span>:`)
	require.NotContains(t, page.Body, `href="#file-main.tf-L2">main.tf`)
	require.NotContains(t, page.Body, "data-marked")

	// Other providers have no module part.
	s.create("/providers", map[string]any{"apiVersion": domain.APIVersion, "kind": "Provider",
		"metadata": map[string]any{"name": "emu"}, "spec": map[string]any{"type": domain.ProviderEmulated, "config": map[string]any{"endpoint": "http://127.0.0.1:1"}}})
	page = b.get("/ui/settings/providers/emu")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.Contains(t, page.Body, `data-testid="provider-config"`)
	require.NotContains(t, page.Body, "provider-validation")
	require.NotContains(t, page.Body, `sse-swap="provider-files"`)

	missing := b.get("/ui/settings/providers/nope")
	require.Equal(t, http.StatusNotFound, missing.Code)
}

// mergeSpans joins neighbouring spans of one colour: where the lexer cuts
// plain text is its own business.
func mergeSpans(lines [][]codeSpan) [][]codeSpan {
	out := make([][]codeSpan, len(lines))
	for i, line := range lines {
		for _, s := range line {
			if n := len(out[i]); n > 0 && out[i][n-1].Class == s.Class {
				out[i][n-1].Text += s.Text
				continue
			}
			out[i] = append(out[i], s)
		}
	}
	return out
}

func TestHighlightHCL(t *testing.T) {
	type sp = codeSpan
	for _, tc := range []struct {
		name, src string
		want      [][]codeSpan
	}{
		{"block keyword and attribute of the same name", "module \"m\" {\n  data = 1\n}\n", [][]sp{
			{{hlKeyword, "module"}, {"", " "}, {hlString, `"m"`}, {"", " {"}},
			{{"", "  data = "}, {hlNumber, "1"}},
			{{"", "}"}},
		}},
		{"keyword not at a line start", "x = data\n", [][]sp{{{"", "x = data"}}}},
		{"comments of three kinds", "# a\n// b\n/* c\nd */ x\n", [][]sp{
			{{hlComment, "# a"}}, {{hlComment, "// b"}}, {{hlComment, "/* c"}}, {{hlComment, "d */"}, {"", " x"}},
		}},
		{"escapes and literal template", `a = "q\"${b}$${c}"`, [][]sp{
			{{"", "a = "}, {hlString, `"q\"`}, {hlTemplate, "${"}, {"", "b"}, {hlTemplate, "}"}, {hlString, `$${c}"`}},
		}},
		{"template with braces and a string inside", `a = "${ {k = "v"} }"`, [][]sp{
			{{"", "a = "}, {hlString, `"`}, {hlTemplate, "${"}, {"", " {k = "}, {hlString, `"v"`}, {"", "} "}, {hlTemplate, "}"}, {hlString, `"`}},
		}},
		{"heredoc with a template", "a = <<-EOT\n  x ${y}\n  EOT\nb = 1.5e3", [][]sp{
			{{"", "a = "}, {hlString, "<<-EOT"}},
			{{hlString, "  x "}, {hlTemplate, "${"}, {"", "y"}, {hlTemplate, "}"}},
			{{hlString, "  EOT"}},
			{{"", "b = "}, {hlNumber, "1.5e3"}},
		}},
		{"an unterminated string ends at its line", "a = \"x\nb = true\n", [][]sp{
			{{"", "a = "}, {hlString, `"x`}},
			{{"", "b = "}, {hlConstant, "true"}},
		}},
		{"carriage returns dropped; no trailing newline keeps the last line", "a\r\n\r\nb", [][]sp{{{"", "a"}}, nil, {{"", "b"}}}},
		{"empty", "", [][]sp{nil}},
		{"json", `{"output": {"x": {"value": null}}}`, [][]sp{
			{{"", "{"}, {hlString, `"output"`}, {"", ": {"}, {hlString, `"x"`}, {"", ": {"}, {hlString, `"value"`}, {"", ": "}, {hlConstant, "null"}, {"", "}}}"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := highlightHCL(tc.src)
			require.Equal(t, tc.want, mergeSpans(got))
			var text []string
			for _, line := range got {
				var b strings.Builder
				for _, s := range line {
					b.WriteString(s.Text)
				}
				text = append(text, b.String())
			}
			want := strings.TrimSuffix(strings.ReplaceAll(tc.src, "\r", ""), "\n")
			require.Equal(t, want, strings.Join(text, "\n"), "the spans are the text")
		})
	}
}
