package domain_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// layerTable reads the table of docs/architecture.md's "Layers and where
// things live": for each row, the backquoted folder of its first cell
// (trailing slash dropped) and the module's folders its last cell names in
// backquotes, sorted. A row whose first cell names several folders, or a
// name that is no folder of the module (a third-party library), is left as
// the reader sees it: only module folders count.
func layerTable(t *testing.T, root string) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## Layers and where things live\n")
	require.True(t, ok, "docs/architecture.md has no section \"Layers and where things live\"")
	section, _, _ = strings.Cut(section, "\n## ")
	quoted := regexp.MustCompile("`([^`]+)`")
	rows := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) < 3 {
			continue
		}
		folders := quoted.FindAllStringSubmatch(cells[0], -1)
		if len(folders) != 1 {
			continue
		}
		var imports []string
		for _, m := range quoted.FindAllStringSubmatch(cells[len(cells)-1], -1) {
			name := strings.TrimSuffix(m[1], "/")
			if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(name))); err == nil && fi.IsDir() && !slices.Contains(imports, name) {
				imports = append(imports, name)
			}
		}
		slices.Sort(imports)
		rows[strings.TrimSuffix(folders[0][1], "/")] = imports
	}
	return rows
}

// TestArchitectureDocMatchesTheLayers holds docs/architecture.md's layer
// table to this package's rules: a row for every layer allowedLayers
// names, and for controllers/<name>, each saying exactly what the rules
// let it import; and every sublayer named in the paragraph above the
// table. A rule changed without its docs, or docs without the rule, fails.
func TestArchitectureDocMatchesTheLayers(t *testing.T) {
	root, _ := moduleRoot(t)
	rows := layerTable(t, root)
	want := map[string][]string{"controllers/<name>": controllerLibraries}
	for layer, allowed := range allowedLayers {
		want[layer] = allowed
	}
	var wrong []string
	for layer, allowed := range want {
		got, ok := rows[layer]
		if !ok {
			wrong = append(wrong, "no row for "+layer)
			continue
		}
		sorted := slices.Sorted(slices.Values(allowed))
		if !slices.Equal(got, sorted) {
			wrong = append(wrong, layer+": the table says "+strings.Join(got, ", ")+"; the test allows "+strings.Join(sorted, ", "))
		}
	}
	if got, want := sublayerSentence(t, root), slices.Sorted(slices.Values(append(slices.Clone(sublayers), "controllers/<name>"))); !slices.Equal(got, want) {
		wrong = append(wrong, "the sublayers named are "+strings.Join(got, ", ")+"; the test's are "+strings.Join(want, ", "))
	}
	slices.Sort(wrong)
	require.Empty(t, wrong, "docs/architecture.md's layer table and domain/imports_test.go disagree")
}

// sublayerSentence is the folders, sorted, that the sentence of
// docs/architecture.md naming the sublayers lists: from "the sublayers,
// which are layers of their own:" to the parenthesis that follows them.
func sublayerSentence(t *testing.T, root string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(strings.Join(strings.Fields(string(doc)), " "), "the sublayers, which are layers of their own:")
	require.True(t, ok, "docs/architecture.md has no sentence naming the sublayers")
	sentence, _, _ := strings.Cut(rest, " (")
	var names []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(sentence, -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	return names
}
