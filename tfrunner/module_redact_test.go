package tfrunner

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestRedactDiagnostic: issue 27, finding 3. tofu validate's message quoted
// what a function read (a file's contents), and the Provider's status is
// readable by every role: what a diagnostic quotes that is not the
// module's own text is redacted; the module's own words stay.
func TestRedactDiagnostic(t *testing.T) {
	m := &domain.ModuleSource{Files: map[string]string{"main.tf": `locals { x = tonumber("${filebase64("/data/secrets.key")}") }
resource "hcloud_server" "a" { server_typ = "cx22" }`}}
	for _, tc := range []struct{ in, want string }{
		{`main.tf:1:14: Invalid function argument: Invalid value for "v" parameter: cannot convert "U0VDUkVULVNFQUwtS0VZLXRoYXQtaXMtbG9uZw==" to number.`,
			`main.tf:1:14: Invalid function argument: Invalid value for "v" parameter: cannot convert "(redacted: not the module's own text)" to number.`},
		{`main.tf:2:32: Unsupported argument: An argument named "server_typ" is not expected here. Did you mean "server_type"?`,
			`main.tf:2:32: Unsupported argument: An argument named "server_typ" is not expected here. Did you mean "server_type"?`},
		{`main.tf:1:40: Invalid function argument: no file exists at "/data/secrets.key"`,
			`main.tf:1:40: Invalid function argument: no file exists at "/data/secrets.key"`},
		{`main.tf:1:1: Error: value U0VDUkVULVNFQUwtS0VZLXRoYXQtaXMtbG9uZw== is not valid`,
			`main.tf:1:1: Error: value (redacted) is not valid`},
		{`tofu init: Error: Failed to query available provider packages registry.opentofu.org/hashicorp/nope`,
			`tofu init: Error: Failed to query available provider packages registry.opentofu.org/hashicorp/nope`},
	} {
		require.Equal(t, tc.want, redactDiagnostic(tc.in, m))
	}
}
