package modulecheck

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// TestValidatedConditionIsRedacted: issue 42, finding 4, as the module
// validator records it. A module spells a file it read in 4-character
// words inside a regular expression; `tofu validate` prints them unquoted,
// and the Validated condition, which every role reads, kept them. Now it
// holds the position and tofu's summary only.
func TestValidatedConditionIsRedacted(t *testing.T) {
	bin, mirror := tofutest.Tools(t)
	base := t.TempDir()
	secret := filepath.Join(base, "outside", "secret")
	require.NoError(t, os.MkdirAll(filepath.Dir(secret), 0o700))
	require.NoError(t, os.WriteFile(secret, []byte("SECRET-SEAL-KEY-that-is-long"), 0o600))
	v := &ModuleValidator{cfg: ValidatorConfig{Tofu: tofu.Binary{Bin: bin, Mirror: mirror}, WorkDir: filepath.Join(base, "work")}}
	p := &domain.Provider{Metadata: domain.ObjectMeta{Name: "mod"}, Spec: domain.ProviderSpec{Type: domain.ProviderModule,
		Module: &domain.ModuleSource{Files: map[string]string{"main.tf": `locals {
  k = filebase64("` + secret + `")
  y = regex("( ${join(" ", [for i in range(0, length(local.k), 4) : substr(local.k, i, 4)])}", "")
}
output "y" { value = local.y }
`}}}}
	status, reason, msg, err := v.validate(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, "False", status)
	require.Equal(t, domain.ReasonModuleInvalid, reason)
	encoded := base64.StdEncoding.EncodeToString([]byte("SECRET-SEAL-KEY-that-is-long"))
	for i := 0; i+4 <= len(encoded); i += 4 {
		require.NotContains(t, msg, encoded[i:i+4])
	}
	require.Equal(t, "main.tf:3:14: Invalid function argument: (redacted)", msg)
}
