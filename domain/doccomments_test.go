package domain_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// misnamedDocs lists the top-level funcs of one parsed file whose doc
// comment does not start with their name (a method's: the method name), as
// "file:line: name: first word". The first word may end in ':' or ',' ("Due:
// at once", "GetUserByID, GetUserByUsername ..."). init is exempt: nothing
// calls it by name. A doc comment that names another function is what a
// rename leaves behind, and the next reader looks for the wrong thing.
func misnamedDocs(fset *token.FileSet, f *ast.File) []string {
	var out []string
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Doc == nil || (fd.Recv == nil && fd.Name.Name == "init") {
			continue
		}
		first := ""
		if words := strings.Fields(fd.Doc.Text()); len(words) > 0 {
			first = strings.TrimRight(words[0], ":,")
		}
		if first != fd.Name.Name {
			pos := fset.Position(fd.Pos())
			out = append(out, fmt.Sprintf("%s:%d: %s: %q", pos.Filename, pos.Line, fd.Name.Name, first))
		}
	}
	return out
}

func TestMisnamedDocs(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"named", "// f does it.\nfunc f() {}", nil},
		{"method", "// Run runs.\nfunc (t T) Run() {}", nil},
		{"colon", "// Due: at once.\nfunc (T) Due() {}", nil},
		{"no doc", "func f() {}", nil},
		{"init", "// A process that ...\nfunc init() {}", nil},
		{"renamed", "// planMachines lists.\nfunc planUpgrade() {}", []string{`x.go:4: planUpgrade: "planMachines"`}},
		{"qualified", "// tofu.Binary is it.\nfunc (w W) Tofu() {}", []string{`x.go:4: Tofu: "tofu.Binary"`}},
		{"article", "// A level of f is ...\nfunc f() {}", []string{`x.go:4: f: "A"`}},
		{"method init", "// starts.\nfunc (T) init() {}", []string{`x.go:4: init: "starts."`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", "package x\n\n"+tc.src+"\n", parser.ParseComments)
			require.NoError(t, err)
			require.Equal(t, tc.want, misnamedDocs(fset, f))
		})
	}
}

// TestDocCommentsNameTheirFunction holds every non-test, non-generated .go
// file of the module to misnamedDocs, skipping what the go tool skips as
// moduleFiles does.
func TestDocCommentsNameTheirFunction(t *testing.T) {
	root, _ := moduleRoot(t)
	fset := token.NewFileSet()
	var bad []string
	files := 0
	walkGoFiles(t, root, func(path, rel string, isTest bool) error {
		if isTest {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		if ast.IsGenerated(f) {
			return nil
		}
		files++
		bad = append(bad, misnamedDocs(fset, f)...)
		return nil
	})
	require.Greater(t, files, 100, "the walk found few files; is the root %s right?", root)
	sort.Strings(bad)
	require.Empty(t, bad, "doc comments that do not start with their function's name:\n%s", strings.Join(bad, "\n"))
}
