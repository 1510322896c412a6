package modulecheck

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// TestExamplesPassTheModuleValidator runs the server's module validator
// (tofu init + validate against the mirror) on the module providers of
// examples/providers, as `rezusctl create provider --type module --from-dir`
// makes them: each gets Validated True. The generated configurations around
// them are planned in providers' example tests.
func TestExamplesPassTheModuleValidator(t *testing.T) {
	bin, mirror := tofutest.Tools(t)
	for _, tc := range []struct {
		dir, config string
		// needs is a provider the mirror must hold (source, version).
		needs [2]string
	}{
		{dir: "emulated", config: `{"emulator":"http://127.0.0.1:1","shape":"lab-large"}`},
		{dir: "hcloud", config: `{"image":"123456789","server_type":"cx32"}`, needs: [2]string{"registry.opentofu.org/hetznercloud/hcloud", "1.52.0"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			if tc.needs[0] != "" {
				tofutest.RequireProvider(t, mirror, tc.needs[0], tc.needs[1])
			}
			p := &domain.Provider{Metadata: domain.ObjectMeta{Name: tc.dir}, Spec: domain.ProviderSpec{
				Type: domain.ProviderModule, Config: json.RawMessage(tc.config), Module: &domain.ModuleSource{Files: tofutest.ModuleFiles(t, filepath.Join("..", "..", "examples", "providers", tc.dir))}}}
			require.Empty(t, p.Spec.Validate("spec"))

			v := NewModuleValidator(ValidatorConfig{Tofu: tofu.Binary{Bin: bin, Mirror: mirror}, WorkDir: t.TempDir()})
			status, reason, msg, err := v.validate(t.Context(), p)
			require.NoError(t, err)
			require.Equal(t, []string{"True", domain.ReasonModuleValid}, []string{status, reason}, msg)
		})
	}
}
