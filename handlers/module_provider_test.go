package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/providers"
)

// goodModule is a minimal module that meets the contract, in HCL.
var goodModule = map[string]string{
	"main.tf": `terraform {
  required_providers {
    emulated = { source = "rezuscloud/emulated", version = "0.1.0" }
  }
}

provider "emulated" {
  endpoint = var.emulator
}

resource "emulated_machine" "m" {
  for_each  = var.machines
  name      = each.value.hostname
  cluster   = var.tenant
  user_data = each.value.config
}
`,
	"variables.tf": `variable "tenant" { type = string }
variable "machines" {
  type = map(object({ config = string, hostname = string }))
}
variable "emulator" { type = string }
variable "size" {
  type    = string
  default = "small"
}
`,
	"outputs.tf.json": `{"output": {"machines": {"value": "${{for k, m in emulated_machine.m : k => {address = m.address, provider_id = m.provider_id}}}"}}}`,
}

func moduleProvider(name string, files map[string]string, config string) map[string]any {
	spec := map[string]any{"type": "module", "module": map[string]any{"files": files}}
	if config != "" {
		spec["config"] = json.RawMessage(config)
	}
	return map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}
}

// with is goodModule with one file replaced (or removed, for "").
func with(name, text string) map[string]string {
	out := map[string]string{}
	for k, v := range goodModule {
		out[k] = v
	}
	if text == "" {
		delete(out, name)
	} else {
		out[name] = text
	}
	return out
}

// TestModuleProvidersCheckedAtWriteTime: each bad module is answered 422
// with a cause at the file, line and column at fault, and nothing is stored.
func TestModuleProvidersCheckedAtWriteTime(t *testing.T) {
	s := newStack(t, func(c *handlers.Config) {
		c.Modules = providers.ModuleChecker{Available: map[string]bool{
			"registry.opentofu.org/rezuscloud/emulated":                    true,
			"registry.opentofu.org/siderolabs/talos":                       true,
			"registry.opentofu.org/hetznercloud/hcloud":                    true,
			"registry.opentofu.org/terraform-provider-openstack/openstack": true,
		}}
	})
	const cfg = `{"emulator":"http://127.0.0.1:8089"}`
	tooMany := map[string]string{}
	for i := range domain.MaxModuleFiles + 1 {
		tooMany[strings.Repeat("a", i%5+1)+string(rune('a'+i%26))+strings.Repeat("x", i/26)+".tf"] = "# empty\n"
	}
	for _, tc := range []struct {
		name   string
		files  map[string]string
		config string
		field  string // the cause's field
		msg    string // a part of its message
	}{
		{"syntax error", with("main.tf", "resource \"emulated_machine\" \"m\" {\n  name = \n}\n"), cfg,
			"spec.module.files[main.tf]", "2:10: Invalid expression"},
		{"json syntax error", with("outputs.tf.json", `{"output": {"machines": }`), cfg,
			"spec.module.files[outputs.tf.json]", "1:25: "},
		{"missing machines output", with("outputs.tf.json", ""), cfg,
			"spec.module.files[main.tf]", `1:1: the module declares no output "machines"`},
		{"missing machines variable", with("variables.tf", "variable \"tenant\" { type = string }\nvariable \"emulator\" { type = string }\n"), cfg,
			"spec.module.files[main.tf]", `1:1: the module declares no variable "machines"`},
		{"backend block", with("backend.tf", "terraform {\n  backend \"s3\" {}\n}\n"), cfg,
			"spec.module.files[backend.tf]", "2:3: a backend block is not allowed"},
		{"cloud block", with("cloud.tf", "terraform {\n  cloud {}\n}\n"), cfg,
			"spec.module.files[cloud.tf]", "2:3: a cloud block is not allowed"},
		{"local-exec provisioner", with("exec.tf", "resource \"emulated_address\" \"a\" {\n  name = \"a\"\n  provisioner \"local-exec\" {\n    command = \"id\"\n  }\n}\n"), cfg,
			"spec.module.files[exec.tf]", "3:3: the local-exec provisioner is not allowed"},
		{"remote-exec provisioner", with("exec.tf", "resource \"emulated_address\" \"a\" {\n  name = \"a\"\n  provisioner \"remote-exec\" {\n    inline = [\"id\"]\n  }\n}\n"), cfg,
			"spec.module.files[exec.tf]", "3:3: the remote-exec provisioner is not allowed"},
		{"unknown provider source", with("aws.tf", "terraform {\n  required_providers {\n    aws = { source = \"hashicorp/aws\", version = \"5.0.0\" }\n  }\n}\n"), cfg,
			"spec.module.files[aws.tf]", "3:5: provider registry.opentofu.org/hashicorp/aws (required_providers.aws) is not in the provider mirror"},
		{"implied provider not in the mirror", with("null.tf", "resource \"null_resource\" \"x\" {}\n"), cfg,
			"spec.module.files[null.tf]", `1:1: resource null_resource.x uses provider "null", which is not in the module's required_providers`},
		{"too many files", tooMany, cfg, "spec.module.files", "must have no more than 64 files"},
		{"a variable without a default nobody sets", with("extra.tf", "variable \"zone\" {\n  type = string\n}\n"), cfg,
			"spec.module.files[extra.tf]", `1:1: variable "zone" has no default and RezusCloud does not set it`},
		{"own variable missing from spec.config", goodModule, `{}`,
			"spec.module.files[variables.tf]", `5:1: variable "emulator" has no default`},
		{"spec.config names no variable", goodModule, `{"emulator":"http://x","region":"fsn1"}`,
			"spec.config.region", `the module declares no variable "region"`},
		{"spec.config sets a contract input", goodModule, `{"emulator":"http://x","tenant":"other"}`,
			"spec.config.tenant", "is set by RezusCloud"},
		{"nested module call", with("nested.tf", "module \"net\" {\n  source = \"git::https://example.com/net.git\"\n}\n"), cfg,
			"spec.module.files[nested.tf]", `1:1: module "net": a module provider is one directory`},
		{"bad file name", with("../main.tf", "# x\n"), cfg,
			"spec.module.files[../main.tf]", "is not a module file name"},
		{"not a tofu file", with("README.md", "# x\n"), cfg,
			"spec.module.files[README.md]", "is not a module file name"},
		{"variable declared twice", with("dup.tf", "variable \"tenant\" { type = string }\n"), cfg,
			"spec.module.files[variables.tf]", `1:1: variable "tenant" is declared twice`},
		{"no files", map[string]string{}, cfg, "spec.module.files", "a module provider needs its module's files"},
		{"unsupported top-level block", with("weird.tf", "widget \"x\" {}\n"), cfg,
			"spec.module.files[weird.tf]", `1:1: Unsupported block type`},
		// Issue 42, finding 2: a provisioner hidden from the exec guard.
		{"a duplicate key hiding a local-exec", with("exec.tf.json", `{"resource": {"terraform_data": {"pwn": {"provisioner": {"local-exec": {"command": "id"}}}}},
			"resource": {"terraform_data": {"quiet": {}}}}`), cfg,
			"spec.module.files[exec.tf.json]", `2:4: Duplicate key: duplicate key "resource" (first at 1:2)`},
		{"a number beyond float64 beside a local-exec", with("exec.tf.json", `{"locals": {"big": 1e400}, "resource": {"terraform_data": {"pwn": {"provisioner": {"local-exec": {"command": "id"}}}}}}`), cfg,
			"spec.module.files[exec.tf.json]", `1:68: the local-exec provisioner is not allowed`},
		// Issue 42, finding 6: 1 MiB of ! killed the server here.
		{"a megabyte of !", with("deep.tf", "locals {\n  x = "+strings.Repeat("!", domain.MaxModuleBytes-4096)+"true\n}\n"), cfg,
			"spec.module.files[deep.tf]", "1:1: Nested too deeply: the text nests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do("POST", "/api/v1/providers", moduleProvider("mod", tc.files, tc.config))
			f := causeFields(t, r)
			require.Contains(t, f, tc.field, "%v", f)
			require.Contains(t, f[tc.field], tc.msg, "%v", f)
			require.Equal(t, http.StatusNotFound, s.do("GET", "/api/v1/providers/mod", nil).Code, "nothing stored")
		})
	}

	// The good module is stored, and a change that breaks it is refused
	// the same way, leaving the stored one as it was.
	s.mustCreate("/api/v1/providers", moduleProvider("mod", goodModule, cfg))
	before := s.do("GET", "/api/v1/providers/mod", nil).object(t)
	f := causeFields(t, s.do(http.MethodPatch, "/api/v1/providers/mod", `{"spec":{"module":{"files":{"outputs.tf.json":null}}}}`))
	require.Contains(t, f["spec.module.files[main.tf]"], `the module declares no output "machines"`)
	after := s.do("GET", "/api/v1/providers/mod", nil).object(t)
	require.Equal(t, before.Metadata.ResourceVersion, after.Metadata.ResourceVersion)

	// A module on a built-in type is refused.
	f = causeFields(t, s.do("POST", "/api/v1/providers", `{"metadata":{"name":"emu2"},"spec":{"type":"emulated","config":{"endpoint":"http://x"},"module":{"files":{"main.tf":"# x"}}}}`))
	require.Contains(t, f["spec.module"], "only a provider of type module has a module")
}

// TestModuleProviderBodies: a module near the 1 MiB bound fits a Provider
// write (whose body limit is larger than other kinds'); past it, 422.
func TestModuleProviderBodies(t *testing.T) {
	s := newStack(t)
	big := with("big.tf", "# "+strings.Repeat("x", 900<<10)+"\n")
	s.mustCreate("/api/v1/providers", moduleProvider("big", big, `{"emulator":"http://x"}`))
	tooBig := with("big.tf", "# "+strings.Repeat("x", domain.MaxModuleBytes)+"\n")
	f := causeFields(t, s.do("POST", "/api/v1/providers", moduleProvider("toobig", tooBig, `{"emulator":"http://x"}`)))
	require.Contains(t, f["spec.module.files"], "at most 1048576")
	// Other kinds keep the 1 MiB body limit.
	r := s.do("POST", "/api/v1/tenants", `{"metadata":{"name":"t","labels":{"x":"`+strings.Repeat("y", 1<<20)+`"}},"spec":{}}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Code)
}
