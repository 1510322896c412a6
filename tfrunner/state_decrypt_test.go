package tfrunner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
	"github.com/rezuscloud/rezuscloud/talos"
)

// TestDecryptStateOfRealTofu: state the real tofu encrypted under
// EncryptionConfig decrypts to the state it holds (the machines project
// from it); a wrong passphrase is an error, plain state passes through.
func TestDecryptStateOfRealTofu(t *testing.T) {
	tofuBin, mirror := tofutest.Tools(t)
	mirror = tofutest.WithProvider(t, mirror, "registry.opentofu.org/rezuscloud/emulated", "0.1.0", "./cmd/terraform-provider-emulated")
	const pass = "correct horse battery staple 42"
	enc, err := EncryptionConfig(pass)
	require.NoError(t, err)
	tofu := &tofuRunner{bin: tofuBin, rc: tofutest.CLIConfig(t, mirror), cache: t.TempDir(), env: []string{"TF_ENCRYPTION=" + enc}}
	_, url := startTestEmulator(t)
	tn := genTenant("demo", "")
	bundle, err := talos.NewBundle(tn.Spec.TalosVersion, time.Now())
	require.NoError(t, err)
	providers := map[string]*domain.Provider{"emulated": genProvider("emulated", domain.ProviderEmulated, `{"endpoint":"`+url+`"}`)}
	dir := writeGenerated(t, emulatedInput(t, tn, bundle, providers, EndpointPlaceholder, 2))
	tofu.run(t, dir, "init", "-input=false", "-no-color")
	tofu.run(t, dir, "apply", "-auto-approve", "-input=false", "-no-color")

	blob, err := os.ReadFile(filepath.Join(dir, "terraform.tfstate"))
	require.NoError(t, err)
	require.Contains(t, string(blob), `"encryption_version"`)
	require.NotContains(t, string(blob), "emulated_machine")
	plain, err := DecryptState(blob, pass)
	require.NoError(t, err)
	machines, err := ProjectState(plain)
	require.NoError(t, err)
	require.Len(t, machines, 3)

	_, err = DecryptState(blob, strings.Repeat("x", 20))
	require.ErrorContains(t, err, "the key does not open it")
	same, err := DecryptState(plain, pass)
	require.NoError(t, err)
	require.Equal(t, plain, same, "plain state passes through")
	_, err = DecryptState([]byte(`{"encryption_version":"v0","meta":{},"encrypted_data":""}`), pass)
	require.ErrorIs(t, err, ErrStateNotDecryptable)
}
