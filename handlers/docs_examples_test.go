package handlers_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/rezuscloud/rezuscloud/domain"
)

// docObject is one RezusCloud object of a ```yaml block of docs/.
type docObject struct {
	where string // "docs/api.md:706"
	obj   map[string]any
}

// docObjects reads the ```yaml blocks of a Markdown file and returns their
// documents that are RezusCloud objects (apiVersion rezuscloud.io/...), in
// the file's order. Other blocks and documents — spec fragments, Kubernetes
// manifests, kubeconfigs — are not meant to be applied and are skipped by
// that rule, not by a list.
func docObjects(path, name string) ([]docObject, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out   []docObject
		block []string
		start int // line of the block's first line of YAML
		in    bool
	)
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		trimmed := strings.TrimSpace(text)
		switch {
		case !in && trimmed == "```yaml":
			in, block, start = true, nil, line+1
		case in && trimmed == "```":
			in = false
			objs, err := yamlObjects(strings.Join(block, "\n"), name, start)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		case in:
			block = append(block, text)
		}
	}
	return out, sc.Err()
}

// yamlObjects decodes the documents of one block; start is the file's line
// of the block's first line.
func yamlObjects(src, name string, start int) ([]docObject, error) {
	var out []docObject
	dec := yaml.NewDecoder(strings.NewReader(src))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, start, err)
		}
		line := n.Line
		if len(n.Content) > 0 {
			line = n.Content[0].Line
		}
		where := fmt.Sprintf("%s:%d", name, start+line-1)
		var obj map[string]any
		if err := n.Decode(&obj); err != nil {
			continue // not an object: a list or a scalar, nothing to apply
		}
		if v, _ := obj["apiVersion"].(string); !strings.HasPrefix(v, "rezuscloud.io/") {
			continue
		}
		out = append(out, docObject{where: where, obj: obj})
	}
}

func TestDocObjects(t *testing.T) {
	dir := t.TempDir()
	md := strings.Join([]string{
		"# A page",                     // 1
		"```yaml",                      // 2
		"spec: {count: 3}",             // 3: a fragment
		"```",                          // 4
		"```yaml",                      // 5
		"apiVersion: v1",               // 6: Kubernetes
		"kind: Service",                // 7
		"---",                          // 8
		"apiVersion: rezuscloud.io/v1", // 9
		"kind: Tenant",                 // 10
		"metadata: {name: a}",          // 11
		"```",                          // 12
		"```sh",                        // 13
		"apiVersion: rezuscloud.io/v1", // 14: not a yaml block
		"```",                          // 15
		"  ```yaml",                    // 16: indented, in a list
		"  apiVersion: rezuscloud.io/v1alpha1",
		"  kind: Rollout",
		"  ```",
	}, "\n")
	p := filepath.Join(dir, "page.md")
	require.NoError(t, os.WriteFile(p, []byte(md), 0o644))
	objs, err := docObjects(p, "page.md")
	require.NoError(t, err)
	var got []string
	for _, o := range objs {
		got = append(got, fmt.Sprintf("%s %s %s", o.where, o.obj["apiVersion"], o.obj["kind"]))
	}
	require.Equal(t, []string{"page.md:9 rezuscloud.io/v1 Tenant", "page.md:17 rezuscloud.io/v1alpha1 Rollout"}, got)
}

// TestDocsYAMLExamplesApply creates every RezusCloud object of docs/*.md's
// ```yaml blocks through the API, in document order, as a reader would
// apply them: a block the server refuses (an old apiVersion, a field that
// was renamed) fails with its file and line. What an example needs and does
// not show — its tenant, the provider its node groups name — is created
// first.
func TestDocsYAMLExamplesApply(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no docs/*.md found from %s", must(os.Getwd()))
	var objs []docObject
	for _, p := range paths {
		o, err := docObjects(p, filepath.ToSlash(filepath.Join("docs", filepath.Base(p))))
		require.NoError(t, err)
		objs = append(objs, o...)
	}
	require.NotEmpty(t, objs, "docs/ holds no RezusCloud object in a yaml block: the test would check nothing")

	s := newStack(t)
	tenants, providers := map[string]bool{}, map[string]bool{}
	for _, o := range objs {
		kind, _ := o.obj["kind"].(string)
		info, ok := domain.LookupKind(kind)
		if !ok {
			t.Errorf("%s: unknown kind %q", o.where, kind)
			continue
		}
		meta, _ := o.obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		path := "/api/v1/" + info.Plural
		if info.TenantScoped {
			tenant, _ := meta["tenant"].(string)
			if tenant == "" {
				tenant = "docs"
				meta["tenant"] = tenant
			}
			if !tenants[tenant] {
				s.ensure(o.where, "/api/v1/tenants/"+tenant, "/api/v1/tenants", tenantBody(tenant, nil))
				tenants[tenant] = true
			}
			path = "/api/v1/tenants/" + tenant + "/" + info.Plural
		}
		if spec, _ := o.obj["spec"].(map[string]any); info == domain.NodeGroupKind && spec != nil {
			if p, _ := spec["provider"].(string); p != "" && !providers[p] {
				s.ensure(o.where, "/api/v1/providers/"+p, "/api/v1/providers", map[string]any{"metadata": map[string]any{"name": p},
					"spec": map[string]any{"type": "emulated", "config": map[string]any{"endpoint": "http://127.0.0.1:8089"}}})
				providers[p] = true
			}
		}
		if info == domain.TenantKind {
			tenants[name] = true
		}
		if info == domain.ProviderKind {
			providers[name] = true
		}
		body, err := json.Marshal(o.obj)
		if err != nil {
			t.Errorf("%s: %s %s: %v", o.where, kind, name, err)
			continue
		}
		r := s.do(http.MethodPost, path, body)
		if r.Code/100 != 2 {
			t.Errorf("%s: creating %s %q answered %d: %s", o.where, kind, name, r.Code, r.Body)
		}
	}
}

// ensure creates what an example needs unless an earlier one created it.
func (s *stack) ensure(where, get, create string, body any) {
	s.t.Helper()
	if r := s.do(http.MethodGet, get, nil); r.Code == http.StatusOK {
		return
	}
	r := s.do(http.MethodPost, create, body)
	require.Equal(s.t, http.StatusCreated, r.Code, "%s: creating %s for the example: %s", where, get, r.Body)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestDocsListEveryKind holds docs/api.md's table of kinds and the README's
// row for domain/ to domain.Kinds(): a kind registered without its docs is
// a kind a reader does not know exists.
func TestDocsListEveryKind(t *testing.T) {
	api, err := os.ReadFile(filepath.Join("..", "docs", "api.md"))
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	var domainRow string
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `domain/` |") {
			domainRow = line
		}
	}
	require.NotEmpty(t, domainRow, "README.md has no row for `domain/` in its table of folders")
	var missing []string
	for _, k := range domain.Kinds() {
		path := "`/api/v1/" + k.Plural + "[/{name}]`"
		if k.TenantScoped {
			path = "`/api/v1/tenants/{tenant}/" + k.Plural + "[/{name}]`"
		}
		scope := map[bool]string{true: "tenant", false: "cluster"}[k.TenantScoped]
		if row := fmt.Sprintf("| %s | %s | %s |", k.Kind, path, scope); !strings.Contains(string(api), row) {
			missing = append(missing, "docs/api.md's table of kinds (## Objects) lacks the row "+row)
		}
		if !regexp.MustCompile(`\b` + k.Kind + `\b`).MatchString(domainRow) {
			missing = append(missing, "README.md's row for domain/ does not name "+k.Kind)
		}
	}
	require.Empty(t, missing)
}
