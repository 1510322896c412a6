package domain_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The layering of docs/architecture.md: dependencies point inward, toward domain. Each
// top-level folder of the module is a layer; subpackages (eventstore/
// eventstoretest) count as their parent, except the sublayers. allowedLayers lists the module-local
// layers a layer's non-test files may import besides itself; a layer missing
// from the map (handlers, cmd, folders the table does not name) may import any
// layer, except what forbiddenLayers says.
var allowedLayers = map[string][]string{
	"domain":      {},
	"eventstore":  {"domain"},
	"projections": {"domain", "eventstore"},
	"identity":    {"domain", "eventstore", "projections"},
	// The cluster-autoscaler's externalgrpc service: reads the read model,
	// writes node groups, keeps its CA in the sealed secrets.
	"autoscaling": {"domain", "eventstore", "projections"},
	"webui":       {"domain", "projections", "handlers", "identity", "providers"},
	// The controller runtime sits right above the event store: every
	// long-running consumer builds on it, so it builds on nothing of theirs.
	"internal/controller": {"domain", "eventstore"},
	// Marks on the processes tofu leaves, and finding them: a leaf.
	"internal/proctree": {},
	// The provider registry: each provider type's validation, form fields,
	// .tf.json generator and state projection. Pure, so the API and the web
	// UI validate and describe with the generator's own rules.
	"providers": {"domain"},
	// The tofu engine: work dirs, the sandbox, state encryption, tofu's
	// JSON UI, apply logs.
	"tofu": {"domain", "eventstore", "internal/proctree", "providers"},
	// The Talos API client: PKI, rendering, credentials, the node API.
	"talos":        {"domain", "eventstore", "projections", "talos/etcdsnapshot"},
	"talos/health": {"domain", "eventstore", "projections"},
	// etcd's snapshot format, which the emulator writes and the backups
	// read: a leaf, so both can use it.
	"talos/etcdsnapshot": {},
	// The Image Factory client: schematics in, nothing of ours but domain.
	"talos/factory": {"domain"},
	// The Kubernetes API of managed clusters: clients on the controller
	// certificate talos issues, and drain.
	"kube": {"domain", "talos"},
	// The emulator is a room of its own: it serves the Talos API and a
	// Kubernetes control plane, knowing nothing of the server.
	"emulator": {"domain", "talos/etcdsnapshot"},
	// Boots an emulated tenant for the controllers' tests.
	"emulator/talostest": {"domain", "emulator", "eventstore", "eventstore/eventstoretest", "projections", "talos"},
}

// controllerLibraries is what every controller of the controllers/ wing may
// import: the libraries beneath it, never another controller (each
// controllers/<name> is a layer of its own, and a controller asks another
// through events).
var controllerLibraries = []string{"domain", "eventstore", "projections", "internal/controller", "internal/proctree",
	"talos", "talos/health", "talos/etcdsnapshot", "talos/factory", "kube", "tofu", "providers"}

// sublayers are folders that are layers of their own rather than part of
// their top-level folder: the controller runtime (internal/ holds test
// helpers too), talos's health probes, snapshot format and factory client,
// and the emulator's test helper. Every controllers/<name> is one too
// (layerOf).
var sublayers = []string{"internal/controller", "internal/proctree", "talos/health", "talos/etcdsnapshot", "talos/factory", "emulator/talostest"}

var forbiddenLayers = map[string][]string{
	"handlers": {"cmd", "webui"},
}

// testOnlyImports are packages a layer may import from _test files only.
var testOnlyImports = map[string][]string{
	"projections": {"eventstore/eventstoretest"},
}

// forbiddenThirdParty are modules outside this one a layer's non-test files
// must not import: identity knows nothing of HTTP routing, so handlers and
// the web UI can both use it.
var forbiddenThirdParty = map[string][]string{
	"identity": {"github.com/labstack/echo"},
}

// domainThirdParty is every package outside the standard library domain may
// import: the small pure libraries docs/architecture.md's layer table names.
var domainThirdParty = []string{
	"github.com/google/uuid",
	"github.com/Masterminds/semver/v3",
	"k8s.io/apimachinery/pkg/labels",
	"k8s.io/apimachinery/pkg/selection",
	"k8s.io/apimachinery/pkg/util/validation",
	"sigs.k8s.io/json",
	// The Image Factory's own YAML library: a schematic's ID is the hash of
	// its encoding, so it must be the factory's.
	"go.yaml.in/yaml/v4",
}

// domainIndirect is what domainThirdParty brings along: domain may depend on
// it through them, but not import it itself.
var domainIndirect = []string{
	"k8s.io/apimachinery/pkg/util/errors",
	"k8s.io/apimachinery/pkg/util/sets",
	"k8s.io/klog/v2",
	"github.com/go-logr/logr",
	"k8s.io/utils/net",
	"k8s.io/utils/internal/third_party/forked/golang/net",
	// apimachinery 0.35's util/validation checks names with these.
	"k8s.io/apimachinery/pkg/api/validate/constraints",
	"k8s.io/apimachinery/pkg/api/validate/content",
}

// layerOf returns the top-level folder of a module-relative path.
func layerOf(rel string) string {
	rel = filepath.ToSlash(rel)
	for _, s := range sublayers {
		if within(rel, s) {
			return s
		}
	}
	if name, ok := strings.CutPrefix(rel, "controllers/"); ok {
		name, _, _ = strings.Cut(name, "/")
		return "controllers/" + name
	}
	if i := strings.IndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	if rel == "." {
		return ""
	}
	return rel
}

// isStdlib reports whether an import path belongs to the standard library:
// its first element has no dot.
func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func within(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// checkImport says what is wrong with the file in module-relative directory
// dir importing imp, or "" when the import is allowed. Test files are only
// held to testOnlyImports' allowances: nothing else is checked for them.
func checkImport(module, dir string, isTest bool, imp string) string {
	from := layerOf(dir)
	if isTest {
		return ""
	}
	if !within(imp, module) {
		if from == "domain" && !isStdlib(imp) {
			for _, ok := range domainThirdParty {
				if within(imp, ok) {
					return ""
				}
			}
			return fmt.Sprintf("domain may import only the standard library and %s, not %s", strings.Join(domainThirdParty, ", "), imp)
		}
		for _, f := range forbiddenThirdParty[from] {
			if within(imp, f) {
				return fmt.Sprintf("%s must not import %s", from, imp)
			}
		}
		return ""
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
	to := layerOf(rel)
	if to == "cmd" {
		return fmt.Sprintf("nothing may import cmd/ (%s imports %s)", dir, imp)
	}
	for _, p := range testOnlyImports[from] {
		if within(rel, p) {
			return fmt.Sprintf("%s may import %s from _test files only", from, p)
		}
	}
	if to == from {
		return ""
	}
	allowed, ok := allowedLayers[from]
	if strings.HasPrefix(from, "controllers/") {
		allowed, ok = controllerLibraries, true
	}
	if ok {
		for _, a := range allowed {
			if a == to {
				return ""
			}
		}
		return fmt.Sprintf("%s may import only %v of this module, not %s", from, allowed, rel)
	}
	for _, f := range forbiddenLayers[from] {
		if f == to {
			return fmt.Sprintf("%s must not import %s/ (%s)", from, to, rel)
		}
	}
	return ""
}

func TestCheckImport(t *testing.T) {
	const m = "example.com/mod"
	tests := []struct {
		dir    string
		test   bool
		imp    string
		wantOK bool
	}{
		{"domain", false, "encoding/json", true},
		{"domain", false, "github.com/google/uuid", true},
		{"domain", false, "github.com/nats-io/nats.go", false},
		{"domain", false, "github.com/google/uuidx", false},
		{"domain", false, m + "/eventstore", false},
		{"domain", true, "github.com/stretchr/testify/require", true},
		{"domain", true, m + "/domain", true},
		{"eventstore", false, m + "/domain", true},
		{"eventstore", false, "github.com/nats-io/nats.go/jetstream", true},
		{"eventstore", false, m + "/projections", false},
		{"eventstore/eventstoretest", false, m + "/eventstore", true},
		{"eventstore/eventstoretest", false, m + "/domain", true},
		{"eventstore/eventstoretest", false, m + "/handlers", false},
		{"projections", false, m + "/eventstore", true},
		{"projections", false, m + "/eventstore/eventstoretest", false},
		{"projections", true, m + "/eventstore/eventstoretest", true},
		{"projections", false, m + "/talos", false},
		{"projections", false, m + "/handlers", false},
		{"controllers/apply", false, m + "/talos", true},
		{"controllers/apply", false, m + "/projections", true},
		{"controllers/apply", false, m + "/handlers", false},
		{"controllers/apply", false, m + "/providers", true},
		{"controllers/apply", false, m + "/tofu", true},
		{"controllers/apply", false, m + "/kube/drain", true},
		{"controllers/apply", false, m + "/controllers/upgrade", false},
		{"controllers/apply", false, m + "/emulator", false},
		{"controllers/upgrade/sub", false, m + "/controllers/upgrade", true},
		{"controllers/upgrade", false, m + "/internal/controller", true},
		{"controllers/upgrade", false, m + "/talos/health", true},
		{"controllers/configsync", false, m + "/controllers/upgrade", false},
		{"controllers/rollout", false, m + "/controllers/remediation", false},
		{"providers", false, m + "/controllers/apply", false},
		{"providers", false, m + "/talos", false},
		{"providers", false, m + "/domain", true},
		{"tofu", false, m + "/providers", true},
		{"tofu", false, m + "/talos", false},
		{"tofu", false, m + "/controllers/apply", false},
		{"kube", false, m + "/talos", true},
		{"kube/drain", false, m + "/controllers/upgrade", false},
		{"webui", false, m + "/providers", true},
		{"webui", false, m + "/controllers/apply", false},
		{"talos", false, m + "/projections", true},
		{"talos", false, m + "/controllers/apply", false},
		{"talos", false, m + "/kube", false},
		{"talos", false, m + "/emulator", false},
		{"emulator", false, m + "/talos", false},
		{"emulator", false, m + "/talos/etcdsnapshot", true},
		{"emulator/kubecp", false, m + "/eventstore", false},
		{"emulator/talostest", false, m + "/emulator", true},
		{"emulator/talostest", false, m + "/talos", true},
		{"talos", false, m + "/controllers/upgrade", false},
		{"talos", false, m + "/internal/controller", false},
		{"talos/health", false, m + "/projections", true},
		{"talos/health", false, m + "/controllers/upgrade", false},
		{"talos/health", false, m + "/internal/controller", false},
		{"internal/controller", false, m + "/eventstore", true},
		{"internal/controller", false, m + "/projections", false},
		{"internal/controller", false, m + "/controllers/apply", false},
		{"internal/controller/controllertest", false, m + "/talos", false},
		{"internal/tofutest", false, m + "/controllers/apply", true},
		{"handlers", false, m + "/controllers/upgrade", true},
		{"handlers", false, m + "/controllers/apply", true},
		{"handlers", false, m + "/talos", true},
		{"handlers", false, m + "/eventstore/eventstoretest", true},
		{"handlers", false, m + "/webui", false},
		{"handlers", false, m + "/cmd/rezuscloud", false},
		{"identity", false, m + "/domain", true},
		{"identity", false, m + "/eventstore", true},
		{"identity", false, m + "/projections", true},
		{"identity", false, m + "/handlers", false},
		{"identity", false, m + "/webui", false},
		{"identity", false, "github.com/labstack/echo/v4", false},
		{"identity", false, "github.com/golang-jwt/jwt/v5", true},
		{"identity", true, "github.com/labstack/echo/v4", true},
		{"handlers", false, m + "/identity", true},
		{"webui", false, m + "/identity", true},
		{"webui", false, m + "/handlers", true},
		{"webui", false, m + "/eventstore", false},
		{"webui", false, m + "/tofu", false},
		{"cmd/rezuscloud", false, m + "/webui", true},
		{"cmd/rezuscloud", false, m + "/controllers/apply", true},
		{"cmd/rezusctl", false, m + "/cmd/rezuscloud", false},
		{"eventstore", false, m + "/cmd", false},
		{"docs/example", false, m + "/cmd/rezusctl", false},
		{"docs/example", false, m + "/handlers", true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s test=%v %s", tc.dir, tc.test, tc.imp), func(t *testing.T) {
			got := checkImport(m, tc.dir, tc.test, tc.imp)
			if tc.wantOK {
				require.Empty(t, got)
			} else {
				require.NotEmpty(t, got)
			}
		})
	}
}

// moduleRoot walks up from the working directory to the go.mod and returns
// the directory and the module path.
func moduleRoot(t *testing.T) (string, string) {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) >= 2 && fields[0] == "module" {
					mod, err := strconv.Unquote(fields[1])
					if err != nil {
						mod = fields[1]
					}
					return dir, mod
				}
			}
			t.Fatalf("%s/go.mod has no module line", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

type goFile struct {
	rel     string // module-relative path of the file
	dir     string // module-relative directory
	isTest  bool
	imports []string
}

// walkGoFiles calls fn with every .go file of the module (its path and
// module-relative path), skipping what the go tool skips: testdata, vendor,
// dot and underscore folders and files, and nested modules.
func walkGoFiles(t *testing.T, root string, fn func(path, rel string, isTest bool) error) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return fn(path, filepath.ToSlash(rel), strings.HasSuffix(name, "_test.go"))
	})
	require.NoError(t, err)
}

// moduleFiles parses the imports of every .go file of the module.
func moduleFiles(t *testing.T, root string) []goFile {
	t.Helper()
	var files []goFile
	fset := token.NewFileSet()
	walkGoFiles(t, root, func(path, rel string, isTest bool) error {
		f, perr := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if perr != nil && f == nil {
			return fmt.Errorf("parse %s: %w", path, perr)
		}
		gf := goFile{rel: rel, dir: filepath.ToSlash(filepath.Dir(rel)), isTest: isTest}
		for _, is := range f.Imports {
			p, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: bad import %s", path, is.Path.Value)
			}
			gf.imports = append(gf.imports, p)
		}
		files = append(files, gf)
		return nil
	})
	return files
}

// layeringViolations lists every forbidden import under root, sorted, and
// whether a non-test domain file was seen.
func layeringViolations(t *testing.T, root, module string) ([]string, bool) {
	t.Helper()
	sawDomain := false
	var violations []string
	for _, f := range moduleFiles(t, root) {
		if f.dir == "domain" && !f.isTest {
			sawDomain = true
		}
		for _, imp := range f.imports {
			if why := checkImport(module, f.dir, f.isTest, imp); why != "" {
				violations = append(violations, fmt.Sprintf("%s imports %q: %s", f.rel, imp, why))
			}
		}
	}
	sort.Strings(violations)
	return violations, sawDomain
}

func TestLayering(t *testing.T) {
	root, module := moduleRoot(t)
	violations, sawDomain := layeringViolations(t, root, module)
	require.True(t, sawDomain, "the walk found no non-test file in domain/; is the root %s right?", root)
	require.Empty(t, violations, "imports that the layering table of docs/architecture.md forbids:\n%s", strings.Join(violations, "\n"))
}

// TestLayeringScan runs the scan over a made-up module, so that the real
// repository passing means something: forbidden imports are found, allowed
// ones and empty layers are not reported.
func TestLayeringScan(t *testing.T) {
	const m = "example.com/mod"
	files := map[string]string{
		"go.mod":                         "module " + m + "\n\ngo 1.26\n",
		"domain/a.go":                    `package domain; import ("fmt"; "github.com/google/uuid"); var _ = fmt.Sprint; var _ = uuid.New`,
		"domain/b.go":                    `package domain; import _ "github.com/nats-io/nats.go"`,
		"domain/a_test.go":               `package domain; import _ "github.com/stretchr/testify/require"`,
		"eventstore/s.go":                `package eventstore; import (_ "example.com/mod/domain"; _ "github.com/nats-io/nats.go")`,
		"eventstore/eventstoretest/h.go": `package eventstoretest; import _ "example.com/mod/eventstore"`,
		"projections/p.go":               `package projections; import (_ "example.com/mod/eventstore"; _ "example.com/mod/handlers")`,
		"projections/q.go":               `package projections; import _ "example.com/mod/eventstore/eventstoretest"`,
		"projections/p_test.go":          `package projections; import _ "example.com/mod/eventstore/eventstoretest"`,
		"handlers/h.go":                  `package handlers; import _ "example.com/mod/cmd/rezuscloud"`,
		"webui/w.go":                     `package webui; import (_ "example.com/mod/handlers"; _ "example.com/mod/eventstore")`,
		"cmd/rezuscloud/main.go":         `package main; import (_ "example.com/mod/webui"; _ "example.com/mod/controllers/apply")`,
		"testdata/bad.go":                `package bad; import _ "example.com/mod/cmd/rezuscloud"`,
		"nested/go.mod":                  "module example.com/nested\n",
		"nested/bad.go":                  `package nested; import _ "example.com/mod/cmd/rezuscloud"`,
		"controllers/README.md":          "empty for now",
	}
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	for _, d := range []string{"talos", "webui/static"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	violations, sawDomain := layeringViolations(t, root, m)
	require.True(t, sawDomain)
	var where []string
	for _, v := range violations {
		file, rest, _ := strings.Cut(v, " imports ")
		imp, _, _ := strings.Cut(rest, ":")
		where = append(where, file+" "+imp)
	}
	require.Equal(t, []string{
		`domain/b.go "github.com/nats-io/nats.go"`,
		`handlers/h.go "example.com/mod/cmd/rezuscloud"`,
		`projections/p.go "example.com/mod/handlers"`,
		`projections/q.go "example.com/mod/eventstore/eventstoretest"`,
		`webui/w.go "example.com/mod/eventstore"`,
	}, where)
}

// TestDomainDependencies asks the go tool for every package domain depends on,
// directly or not: only the standard library, domainThirdParty and
// domainIndirect may be among them.
func TestDomainDependencies(t *testing.T) {
	// The tests run under the go tool, so it is there; a missing one fails the
	// test rather than skipping the rule.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list dependencies: %v", err)
	}
	root, module := moduleRoot(t)
	cmd := exec.Command(goBin, "list", "-e", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./domain")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		p := strings.TrimSpace(line)
		if p == "" || p == module+"/domain" {
			continue
		}
		ok := false
		for _, allowed := range append(domainThirdParty, domainIndirect...) {
			if within(p, allowed) {
				ok = true
			}
		}
		if !ok {
			bad = append(bad, p)
		}
	}
	require.Empty(t, bad, "domain depends on packages outside the standard library, %v and %v", domainThirdParty, domainIndirect)
}
