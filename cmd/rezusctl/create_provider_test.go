package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/rezuscloud/rezuscloud/domain"
)

// moduleFilesOf reads the module files of a directory, as tofu would.
func moduleFilesOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string]string{}
	for _, e := range entries {
		if isModuleFile(e.Name()) {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
			files[e.Name()] = string(b)
		}
	}
	return files
}

func TestCreateProviderFromDir(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	r := tc.run("create", "provider", "lab", "--from-dir", "testdata/module", "--config", "emulator=http://127.0.0.1:8089", "--credentials", "lab-creds")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "provider/lab created\n", r.stdout)
	assert.Contains(t, r.stderr, "skipping testdata/module/README.md: not a .tf or .tf.json file\n")
	assert.Contains(t, r.stderr, "rezusctl get provider lab shows the outcome")
	assert.Equal(t, []string{"POST /api/v1/providers"}, f.callLog())

	var p domain.Provider
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/providers"), &p))
	assert.Equal(t, domain.APIVersion, p.APIVersion)
	assert.Equal(t, "Provider", p.Kind)
	assert.Equal(t, "lab", p.Metadata.Name)
	assert.Equal(t, domain.ProviderModule, p.Spec.Type, "--from-dir implies --type module")
	assert.JSONEq(t, `{"emulator":"http://127.0.0.1:8089"}`, string(p.Spec.Config))
	require.NotNil(t, p.Spec.CredentialsRef)
	assert.Equal(t, "lab-creds", p.Spec.CredentialsRef.Name)
	require.NotNil(t, p.Spec.Module)
	assert.Equal(t, moduleFilesOf(t, "testdata/module"), p.Spec.Module.Files)
	assert.Equal(t, []string{"main.tf", "outputs.tf.json", "variables.tf"}, p.Spec.Module.SortedFiles())
	assert.Empty(t, p.Spec.Validate("spec"), "the domain accepts what was sent")

	// Other types take flags alone.
	assert.Equal(t, "provider/emu created\n", tc.ok("create", "pv", "emu", "--type", "emulated", "--config", "endpoint=http://127.0.0.1:1"))
	var emu domain.Provider
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/providers"), &emu))
	assert.Equal(t, domain.ProviderEmulated, emu.Spec.Type)
	assert.Nil(t, emu.Spec.Module)

	// create -f still works beside the subcommand.
	tc.stdin = "kind: Tenant\nmetadata: {name: acme}\n"
	assert.Equal(t, "tenant/acme created\n", tc.ok("create", "-f", "-"))
}

func TestCreateProviderConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cfg.yaml")
	require.NoError(t, os.WriteFile(file, []byte("region: eu-frankfurt-1\nsizes: [2, 4]\nendpoint: overridden\n"), 0o600))
	tc := newTestCLI(t)
	out := tc.ok("create", "provider", "oci", "--type", "oci", "--config-file", file, "--config", "endpoint=https://x.example.com", "--dry-run")
	var p struct {
		Metadata struct{ Name string }
		Spec     struct{ Config map[string]any }
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &p))
	assert.Equal(t, "oci", p.Metadata.Name)
	assert.Equal(t, map[string]any{"region": "eu-frankfurt-1", "sizes": []any{2, 4}, "endpoint": "https://x.example.com"}, p.Spec.Config,
		"the file's values keep their types; --config overrides them")
}

// TestCreateProviderVersions: --kubernetes-versions and --talos-versions
// are comma lists (or repeated) into spec.versions; without them the
// Provider declares none (any version).
func TestCreateProviderVersions(t *testing.T) {
	tc := newTestCLI(t)
	out := tc.ok("create", "provider", "os", "--type", "openstack", "--kubernetes-versions", "v1.35.4,1.36.1",
		"--talos-versions", "v1.13.0", "--talos-versions", "v1.12.6", "--dry-run")
	var p struct {
		Spec struct{ Versions map[string][]string }
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &p))
	assert.Equal(t, map[string][]string{"kubernetes": {"v1.35.4", "1.36.1"}, "talos": {"v1.13.0", "v1.12.6"}}, p.Spec.Versions,
		"sent as given: the server writes them canonical")

	out = tc.ok("create", "provider", "os", "--type", "openstack", "--dry-run")
	assert.NotContains(t, out, "versions")
}

func TestCreateProviderDryRun(t *testing.T) {
	tc := newTestCLI(t) // no server: a dry run needs none
	r := tc.run("create", "provider", "lab", "--from-dir", "testdata/module", "--config", "emulator=http://127.0.0.1:8089", "--dry-run")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "apiVersion: rezuscloud.io/v1\nkind: Provider\nmetadata:\n  name: lab\nspec:\n  type: module\n")
	assert.Contains(t, r.stdout, "      main.tf: |\n        # A small module provider", "files are literal blocks")

	// The manifest applies as it is.
	f, srv := newFakeAPI(t)
	tc.loginTo(srv.URL)
	tc.stdin = r.stdout
	assert.Equal(t, "provider/lab created\n", tc.ok("apply", "-f", "-"))
	var p domain.Provider
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/providers"), &p))
	assert.Equal(t, moduleFilesOf(t, "testdata/module"), p.Spec.Module.Files)
}

func TestCreateProviderErrors(t *testing.T) {
	empty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(empty, "README.md"), []byte("no module here"), 0o600))
	binary := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(binary, "main.tf"), []byte("resource \"x\" \"y\" {}\n\xff\xfe"), 0o600))
	notObject := filepath.Join(t.TempDir(), "list.yaml")
	require.NoError(t, os.WriteFile(notObject, []byte("- a\n- b\n"), 0o600))

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no name", []string{"--type", "emulated"}, "give the provider's name"},
		{"two names", []string{"a", "b", "--type", "emulated"}, "give the provider's name"},
		{"no type", []string{"x"}, "give the provider's --type"},
		{"module without files", []string{"x", "--type", "module"}, "a module provider needs its module: give --from-dir DIR"},
		{"files of another type", []string{"x", "--type", "emulated", "--from-dir", "testdata/module"}, "--from-dir gives a module provider's files: it goes with --type module, not emulated"},
		{"no module files", []string{"x", "--from-dir", empty}, empty + " holds no .tf or .tf.json files"},
		{"missing dir", []string{"x", "--from-dir", filepath.Join(empty, "nope")}, "no such file or directory"},
		{"not UTF-8", []string{"x", "--from-dir", binary}, filepath.Join(binary, "main.tf") + " is not UTF-8 text"},
		{"config not KEY=VALUE", []string{"x", "--type", "emulated", "--config", "endpoint"}, `--config "endpoint" is not KEY=VALUE`},
		{"config file not an object", []string{"x", "--type", "emulated", "--config-file", notObject}, "does not hold an object of settings"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCLI(t)
			r := tc.run(append([]string{"create", "provider", "--dry-run"}, tt.args...)...)
			assert.Equal(t, 1, r.code)
			assert.Contains(t, r.stderr, tt.want)
			assert.Empty(t, r.stdout)
		})
	}
}

func TestReadModuleDirSkips(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"main.tf": "locals {}\n", "extra.tf.json": "{}", "terraform.tfvars": "x = 1\n", ".terraform.lock.hcl": "# lock\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "modules"), 0o700))
	require.NoError(t, os.Mkdir(filepath.Join(dir, ".terraform"), 0o700))
	require.NoError(t, os.Symlink("main.tf", filepath.Join(dir, "linked.tf")))

	var notes strings.Builder
	files, err := readModuleDir(dir, &notes)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"main.tf": "locals {}\n", "extra.tf.json": "{}", "linked.tf": "locals {}\n"}, files)
	assert.Equal(t, "skipping "+filepath.Join(dir, "modules")+": a directory (a module provider's module is one directory; subdirectories are not sent)\n"+
		"skipping "+filepath.Join(dir, "terraform.tfvars")+": not a .tf or .tf.json file\n", notes.String(),
		"hidden entries are tofu's own and skipped silently")

	big := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(big, "a.tf"), make([]byte, domain.MaxModuleBytes), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(big, "b.tf"), []byte("x"), 0o600))
	_, err = readModuleDir(big, &notes)
	assert.ErrorContains(t, err, "total more than 1048576 bytes")
}

// A module the server refuses is reported against the files on disk,
// compiler style, so that an editor can jump to each finding.
func TestCreateProviderModuleCauses(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.handle("POST /api/v1/providers", func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, domain.NewInvalid("Provider", "lab", []domain.Cause{
			{Field: "spec.module.files[main.tf]", Type: domain.CauseInvalid, Message: `16:3: Unsupported argument: An argument named "endpont" is not expected here.`},
			{Field: "spec.module.files[variables.tf]", Type: domain.CauseRequired, Message: `the module declares no variable "machines"`},
			{Field: "spec.config.emulator", Type: domain.CauseRequired, Message: "the module's variable emulator has no default: set it"},
		}))
	})
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	r := tc.run("create", "provider", "lab", "--from-dir", "testdata/module")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "Error from server (Invalid): ")
	assert.Contains(t, r.stderr, "\n  "+filepath.Join("testdata", "module", "main.tf")+`:16:3: Unsupported argument: An argument named "endpont" is not expected here.`+"\n")
	assert.Contains(t, r.stderr, "\n  "+filepath.Join("testdata", "module", "variables.tf")+`: the module declares no variable "machines"`+"\n")
	assert.Contains(t, r.stderr, "\n  spec.config.emulator: the module's variable emulator has no default: set it\n")
	assert.Empty(t, r.stdout)
}

// examples/providers/emulated/provider.yaml inlines the module files beside
// it: it must not fall behind them.
func TestExampleEmulatedManifest(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "providers", "emulated")
	b, err := os.ReadFile(filepath.Join(dir, "provider.yaml"))
	require.NoError(t, err)
	docs, err := parseDocuments(strings.NewReader(string(b)), "provider.yaml")
	require.NoError(t, err)
	require.Len(t, docs, 1)
	var p domain.Provider
	require.NoError(t, json.Unmarshal(docs[0].Raw, &p))
	require.NotNil(t, p.Spec.Module)
	assert.Equal(t, moduleFilesOf(t, dir), p.Spec.Module.Files,
		"provider.yaml is stale: write it again as its comment says")
	assert.Empty(t, p.Spec.Validate("spec"))
}

// describe shows a module provider's files by size (get -o yaml has them
// whole) and the Validated condition's diagnostics one per line.
func TestDescribeModuleProvider(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/providers/lab", obj("Provider", "", "lab", tcNow,
		`{"type":"module","config":{"emulator":"http://127.0.0.1:8089"},"module":{"files":{"main.tf":"terraform {}\nlocals {\n  x = 1\n}\n","outputs.tf":"output \"machines\" { value = {} }"}}}`,
		`{"conditions":[{"type":"Validated","status":"False","reason":"Invalid","observedGeneration":1,"lastTransitionTime":"2026-05-01T11:55:00Z",`+
			`"message":"main.tf:3:3: Unsupported argument: An argument named \"x\" is not expected here.\noutputs.tf:1:1: Missing required argument: The argument \"description\" is required."}]}`,
		nil))
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	golden(t, "describe.provider", tc.ok("describe", "provider", "lab"))
	assert.Contains(t, tc.ok("get", "provider", "lab"), "False (Invalid)")
}
