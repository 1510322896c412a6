package providers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// execResourceJSON is a resource whose local-exec runs `id` at apply.
const execResourceJSON = `"resource": {"terraform_data": {"pwn": {"provisioner": {"local-exec": {"command": "id > /tmp/pwned"}}}}}`

// guardBypasses are issue 42's finding 2 and its neighbours: module files
// that hid a provisioner from the exec guard, or that the guard could not
// read (and so did not judge), while tofu reads them and runs the
// provisioner. Each must be refused at the file.
var guardBypasses = []struct {
	name, file, text string
	// msg is a part of the cause's message.
	msg string
}{
	{"a duplicate top-level key", "x.tf.json",
		`{` + execResourceJSON + `, "resource": {"terraform_data": {"quiet": {}}}}`, `duplicate key "resource"`},
	{"a number beyond float64", "x.tf.json",
		`{"locals": {"big": 1e400}, ` + execResourceJSON + `}`, "provisioner is not allowed"},
	{"a duplicate nested key", "x.tf.json",
		`{"resource": {"terraform_data": {"pwn": {"provisioner": {"local-exec": {"command": "id"}}}}, "terraform_data": {"quiet": {}}}}`, `duplicate key "terraform_data"`},
	{"a duplicate key spelled with an escape", "x.tf.json",
		`{` + execResourceJSON + `, "re\u0073ource": {"terraform_data": {"quiet": {}}}}`, `duplicate key "resource"`},
	{"blocks as arrays of objects", "x.tf.json",
		`{"resource": [{"terraform_data": [{"pwn": [{"provisioner": [{"local-exec": [{"command": "id"}]}]}]}]}]}`, "local-exec provisioner is not allowed"},
	{"a unicode-escaped key", "x.tf.json",
		`{"resource": {"terraform_data": {"pwn": {"pro\u0076isioner": {"local-exec": {"command": "id"}}}}}}`, "local-exec provisioner is not allowed"},
	{"a comment key beside it", "x.tf.json",
		`{"//": "nothing to see", "resource": {"terraform_data": {"pwn": {"//": {"provisioner": 1}, "provisioner": {"local-exec": {"command": "id"}}}}}}`, "provisioner is not allowed"},
	{"a top-level array of bodies", "x.tf.json",
		`[{` + execResourceJSON + `}]`, "provisioner is not allowed"},
	{"an override file", "main_override.tf.json",
		`{` + execResourceJSON + `}`, "provisioner is not allowed"},
	{"an override file, native", "override.tf",
		"resource \"terraform_data\" \"pwn\" {\n  provisioner \"local-exec\" {\n    command = \"id\"\n  }\n}\n", "provisioner is not allowed"},
	{"trailing data after the value", "x.tf.json",
		`{"locals": {}} {` + execResourceJSON + `}`, ""},
	{"a .tofu file", "x.tofu",
		"resource \"terraform_data\" \"pwn\" {\n  provisioner \"local-exec\" {\n    command = \"id\"\n  }\n}\n", "tofu reads it, but this server judges only .tf and .tf.json files"},
	{"a .tofu.json file", "x.tofu.json",
		`{` + execResourceJSON + `}`, "tofu reads it, but this server judges only .tf and .tf.json files"},
	{"a local module call", "x.tf",
		"module \"sub\" {\n  source = \"./sub\"\n}\n", "a module provider is one directory"},
	{"a module call beside a duplicate key", "x.tf.json",
		`{"module": {"sub": {"source": "../other"}}, "module": {}}`, `duplicate key "module"`},
	{"a file in a directory", "sub/x.tf",
		"resource \"terraform_data\" \"pwn\" {\n  provisioner \"local-exec\" {\n    command = \"id\"\n  }\n}\n", "not a file name of the module's directory"},
}

// TestModuleExecGuardBypasses: issue 42, finding 2. With exec off, each
// module above reached tofu with its local-exec (Go's map kept the last of
// two "resource" keys, and a number beyond float64 made the JSON decode fail
// and the scan be skipped). Each is refused now, at the file that holds it,
// whatever the server's flags; a module with exec allowed is still refused
// for what the guard cannot read.
func TestModuleExecGuardBypasses(t *testing.T) {
	mirror := map[string]bool{"registry.opentofu.org/rezuscloud/emulated": true}
	for _, tc := range guardBypasses {
		t.Run(tc.name, func(t *testing.T) {
			_, causes := ModuleChecker{Available: mirror}.Check(emulatedModuleSpec(map[string]string{tc.file: tc.text}))
			file := domain.ModuleFileField(field.NewPath("spec"), tc.file)
			var at []string
			for _, c := range causes {
				if c.Field == file {
					at = append(at, c.Message)
				}
			}
			require.NotEmpty(t, at, "nothing refused at %s: %v", file, causes)
			require.True(t, strings.Contains(strings.Join(at, "\n"), tc.msg), "%q not in %q", tc.msg, at)
		})
	}
}

// TestModuleExecGuardHoldsAtApply replays finding 2 as the issue ran it: a
// module provider stored with the bypass (written before the fix, or by a
// replica without it) reaches the apply. Every apply generates the
// configuration through the module checker, so the run fails before tofu
// starts, naming the Provider and the file. On the old code Generate took
// it, and tofu ran the local-exec: the control below runs the file with
// the real tofu and finds the command ran.
func TestModuleExecGuardHoldsAtApply(t *testing.T) {
	tofu := tofutest.NewRunner(t)
	_, mirror := tofutest.Tools(t)
	checker, err := NewModuleChecker(mirror, false)
	require.NoError(t, err)
	for _, tc := range []struct{ name, text string }{
		{"a duplicate top-level key", `{"resource": {"terraform_data": {"pwn": {"provisioner": {"local-exec": {"command": %s}}}}},
			"resource": {"terraform_data": {"quiet": {}}}}`},
		{"a number beyond float64", `{"locals": {"big": 1e400},
			"resource": {"terraform_data": {"pwn": {"provisioner": {"local-exec": {"command": %s}}}}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "pwned")
			cmd, _ := json.Marshal("touch " + marker)
			exec := strings.Replace(tc.text, "%s", string(cmd), 1)

			p := genProvider("lab", domain.ProviderModule, `{"emulator":"http://127.0.0.1:1"}`)
			p.Spec.Module = emulatedExampleModule(t)
			p.Spec.Module.Files["exec.tf.json"] = exec
			te := genTenant("demo", "https://cp.example.com:6443")
			_, err := Generate(GenerateInput{Tenant: te, Providers: map[string]*domain.Provider{"lab": p}, Modules: checker,
				Groups: []GroupInput{genGroup(te, "workers", domain.RoleWorker, "lab", 1, "")}})
			require.True(t, domain.IsInvalid(err), "the apply's configuration was generated: %v", err)
			require.ErrorContains(t, err, "spec.module.files[exec.tf.json]")

			// The control: tofu reads the file as it is, and runs the command.
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "exec.tf.json"), []byte(exec), 0o600))
			tofu.Run(t, dir, "init", "-input=false", "-no-color")
			tofu.Run(t, dir, "apply", "-auto-approve", "-input=false", "-no-color")
			_, err = os.Stat(marker)
			require.NoError(t, err, "tofu ran the local-exec the guard was shown")
		})
	}
}
