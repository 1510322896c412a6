package modulecheck

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// TestRedactDiagnostic: issues 27 and 42 (finding 4). tofu's diagnostics
// quote what a module's functions computed (a file's contents), and the
// Provider's status is readable by every role, a dry run's plan error by the
// tenant's editors. Issue 27 redacted quoted values not in the module and
// words of 24 characters or more that looked like data; a module beat it by
// spelling a secret in 4-character words, by quoting pieces found somewhere
// in its files, and by a provider's summary. What is kept now is tofu's own
// text: positions, constant summaries, static details of the module's names.
func TestRedactDiagnostic(t *testing.T) {
	files := map[string]string{"main.tf": `locals {
  k = filebase64("/outside/secret")
  x = tonumber(local.k)
  y = regex("( ${join(" ", [for i in range(0, length(local.k), 4) : substr(local.k, i, 4)])}", "")
  z = [for i in range(0, length(local.k), 2) : tonumber(lookup(local.hex, substr(local.k, i, 2)))]
  hex = { "U0" = "U0", "VD" = "VD", "Uk" = "Uk" }
}
resource "hcloud_server" "a" { server_typ = "cx22" }
resource "terraform_data" "b" { for_each = toset([local.k]) }`}
	for _, tc := range []struct{ name, in, want string }{
		{"a quoted value the module read",
			`main.tf:3:7: Invalid function argument: Invalid value for "v" parameter: cannot convert "U0VDUkVULVNFQUwtS0VZLXRoYXQtaXMtbG9uZw==" to number.`,
			`main.tf:3:7: Invalid function argument: (redacted)`},
		{"the secret spelled in 4-character words, unquoted",
			"main.tf:4:7: Error in function call: Call to function \"regex\" failed: error parsing regexp: missing closing ): `( U0VD UkVU LVNF QUwt S0VZ`.",
			`main.tf:4:7: Error in function call: (redacted)`},
		{"pieces quoted that the module holds elsewhere",
			`main.tf:5:7: Invalid function argument: Invalid value for "v" parameter: cannot convert "VD" to number.`,
			`main.tf:5:7: Invalid function argument: (redacted)`},
		{"a path the module read from",
			`main.tf:2:7: Invalid function argument: Invalid value for "path" parameter: no file exists at "/outside/secret"`,
			`main.tf:2:7: Invalid function argument: (redacted)`},
		{"a summary that is not tofu's (a provider's, a check's)",
			`main.tf:8:1: U0VD UkVU LVNF QUwt S0VZ: the provider said so`,
			`main.tf:8:1: (redacted)`},
		{"a static diagnostic of the module's names, and tofu's suggestion",
			`main.tf:8:32: Unsupported argument: An argument named "server_typ" is not expected here. Did you mean "server_type"?`,
			`main.tf:8:32: Unsupported argument: An argument named "server_typ" is not expected here. Did you mean "server_type"?`},
		{"a static diagnostic's name the module holds, whatever it looks like",
			`main.tf:8:32: Unsupported argument: An argument named "U0" is not expected here.`,
			`main.tf:8:32: Unsupported argument: An argument named "U0" is not expected here.`},
		{"a static template naming what the module does not hold",
			`main.tf:8:32: Unsupported argument: An argument named "S0VZ" is not expected here.`,
			`main.tf:8:32: Unsupported argument: (redacted)`},
		{"a file that is not the module's",
			`/outside/U0VD.tf:1:1: Unsupported argument: An argument named "server_typ" is not expected here.`,
			`(redacted): Unsupported argument: An argument named "server_typ" is not expected here.`},
		{"tofu init's blocks",
			`tofu init: Error: Failed to query available provider packages Could not retrieve the list of available versions for provider hashicorp/nope: provider registry.opentofu.org/hashicorp/nope was not found Error: Module not found The module address "./U0VDUkVU" could not be resolved.`,
			`tofu init: Error: Failed to query available provider packages: (redacted) Error: Module not found: (redacted)`},
		{"tofu init's providers the module names",
			`tofu init: Error: Failed to resolve provider packages Could not resolve provider hashicorp/hcloud: provider registry.opentofu.org/hashicorp/hcloud was not found in any of the search locations - /srv/mirror/U0VD/UkVU`,
			`tofu init: Error: Failed to resolve provider packages: hashicorp/hcloud: (redacted)`},
		{"a plan's error on an instance whose key the module read",
			`tofu plan: terraform_data.b["U0VDUkVU"]: Invalid function argument: Invalid value for "v" parameter: cannot convert "U0VD" to number.`,
			`tofu plan: terraform_data.b["(redacted)"]: Invalid function argument: (redacted)`},
		{"a plan's error on an instance of the module's own key",
			`tofu plan: module.g["hex"].terraform_data.b[0]: Invalid count argument`,
			`tofu plan: module.g["hex"].terraform_data.b[0]: Invalid count argument`},
		{"a summary alone", `main.tf:1:1: Invalid count argument`, `main.tf:1:1: Invalid count argument`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tofu.RedactForReaders(tc.in, files))
		})
	}
}

// TestRedactWhatTheRealTofuSaid: issue 42, finding 4, with the real tofu. A
// module spells a file it read (outside itself) in 4-character words inside
// a regular expression; `tofu validate` prints them unquoted in the
// diagnostic's detail ("missing closing ) in ( U0VD UkVU ..."), which the
// redaction of issue 27 kept, every word being short. None of them is left.
func TestRedactWhatTheRealTofuSaid(t *testing.T) {
	bin, _ := tofutest.Tools(t)
	base := t.TempDir()
	secret := filepath.Join(base, "outside", "secret")
	require.NoError(t, os.MkdirAll(filepath.Dir(secret), 0o700))
	require.NoError(t, os.WriteFile(secret, []byte("SECRET-SEAL-KEY-that-is-long"), 0o600))
	dir := filepath.Join(base, "module")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	files := map[string]string{"main.tf": `locals {
  k = filebase64("` + secret + `")
  y = regex("( ${join(" ", [for i in range(0, length(local.k), 4) : substr(local.k, i, 4)])}", "")
}
output "y" { value = local.y }
`}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte(files["main.tf"]), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(base, "tofurc"), nil, 0o600))
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + base, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1",
		"TF_CLI_CONFIG_FILE=" + filepath.Join(base, "tofurc")}
	tf := tofu.Binary{Bin: bin}
	var out bytes.Buffer
	require.NoError(t, tf.RunTofu(context.Background(), dir, env, &out, "init", "-backend=false", "-input=false", "-no-color"), out.String())
	out.Reset()
	_ = tf.RunTofu(context.Background(), dir, env, &out, "validate", "-json", "-no-color")
	var res struct {
		Diagnostics []tofuDiagnostic `json:"diagnostics"`
	}
	require.NoError(t, json.Unmarshal(jsonPart(out.Bytes()), &res), out.String())
	require.Len(t, res.Diagnostics, 1, out.String())
	raw := formatDiagnostic(res.Diagnostics[0])
	encoded := base64.StdEncoding.EncodeToString([]byte("SECRET-SEAL-KEY-that-is-long"))
	require.Contains(t, raw, encoded[:4]+" "+encoded[4:8], "tofu printed the words: the attack is real")

	got := tofu.RedactForReaders(raw, files)
	for i := 0; i+4 <= len(encoded); i += 4 {
		require.NotContains(t, got, encoded[i:i+4])
	}
	require.Equal(t, "main.tf:3:14: Invalid function argument: (redacted)", got)
	require.False(t, strings.Contains(got, "SECRET"))
}
