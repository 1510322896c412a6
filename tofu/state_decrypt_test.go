package tofu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// TestDecryptStateOfRealTofu: state the real tofu encrypted under
// EncryptionConfig decrypts to the state it holds; a wrong passphrase is an
// error, plain state passes through. The configuration is one
// terraform_data resource (tofu's built-in provider), so that what is
// tested is the encryption, not a provider.
func TestDecryptStateOfRealTofu(t *testing.T) {
	const pass = "correct horse battery staple 42"
	enc, err := EncryptionConfig(pass)
	require.NoError(t, err)
	tofu := tofutest.NewRunner(t)
	tofu.Env = []string{"TF_ENCRYPTION=" + enc}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf.json"),
		[]byte(`{"resource":{"terraform_data":{"machine":{"input":"cp-0 at 10.5.0.2"}}}}`), 0o600))
	tofu.Run(t, dir, "init", "-input=false", "-no-color")
	tofu.Run(t, dir, "apply", "-auto-approve", "-input=false", "-no-color")

	blob, err := os.ReadFile(filepath.Join(dir, "terraform.tfstate"))
	require.NoError(t, err)
	require.Contains(t, string(blob), `"encryption_version"`)
	require.NotContains(t, string(blob), "10.5.0.2")
	plain, err := DecryptState(blob, pass)
	require.NoError(t, err)
	var state struct {
		Resources []struct {
			Type      string `json:"type"`
			Instances []struct {
				Attributes struct {
					Output struct {
						Value string `json:"value"`
					} `json:"output"`
				} `json:"attributes"`
			} `json:"instances"`
		} `json:"resources"`
	}
	require.NoError(t, json.Unmarshal(plain, &state), "%s", plain)
	require.Len(t, state.Resources, 1)
	require.Equal(t, "terraform_data", state.Resources[0].Type)
	require.Equal(t, "cp-0 at 10.5.0.2", state.Resources[0].Instances[0].Attributes.Output.Value)

	_, err = DecryptState(blob, strings.Repeat("x", 20))
	require.ErrorContains(t, err, "the key does not open it")
	same, err := DecryptState(plain, pass)
	require.NoError(t, err)
	require.Equal(t, plain, same, "plain state passes through")
	_, err = DecryptState([]byte(`{"encryption_version":"v0","meta":{},"encrypted_data":""}`), pass)
	require.ErrorIs(t, err, ErrStateNotDecryptable)
}
