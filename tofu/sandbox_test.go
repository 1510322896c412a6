package tofu

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// TestSandboxHidesTheServersSecrets: issue 27, finding 3. A module's
// functions read any file the server could: `tofu validate` printed the seal
// key, the NATS operator seed and the server's credentials. In the sandbox a
// module that tries file() on each of them, and on another tenant's work
// dir, reads nothing; its own work dir it reads as before.
func TestSandboxHidesTheServersSecrets(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatal("the sandbox is Linux's mount namespaces")
	}
	tofu, _ := tofutest.Tools(t)
	base := t.TempDir()
	data := filepath.Join(base, "data")
	keyFile := filepath.Join(base, "elsewhere", "seal.key") // --secrets-key-file, outside the data dir
	secrets := map[string]string{
		filepath.Join(data, "secrets.key"):                                   "SECRET-SEAL-KEY",
		filepath.Join(data, "nats-keys", "operator.nk"):                      "SECRET-OPERATOR-SEED",
		filepath.Join(data, "nats-keys", "rezuscloud.creds"):                 "SECRET-SERVER-CREDS",
		filepath.Join(data, "tofu", "tenants", "other", "terraform.tfstate"): "SECRET-OTHER-TENANT",
		keyFile: "SECRET-KEY-FILE",
	}
	for p, v := range secrets {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte(v), 0o600))
	}
	dir := filepath.Join(data, "tofu", "tenants", "mine")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "own.txt"), []byte("MY-OWN-TEXT"), 0o600))
	var main strings.Builder
	main.WriteString("output \"own\" {\n  value = file(\"${path.module}/own.txt\")\n}\n")
	i := 0
	for p := range secrets {
		main.WriteString("output \"s" + string(rune('a'+i)) + "\" {\n  value = try(file(\"" + p + "\"), \"unreadable\")\n}\n")
		i++
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main.String()), 0o600))

	tf := Binary{Bin: tofu, Sandbox: &Sandbox{Hide: []string{data}, HideFiles: []string{keyFile}}}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Join(data, "tofu", "home"), "TF_IN_AUTOMATION=1",
		"CHECKPOINT_DISABLE=1", "TF_CLI_CONFIG_FILE=" + filepath.Join(base, "no-tofurc")}
	ctx := context.Background()
	var out bytes.Buffer
	require.NoError(t, tf.RunTofu(ctx, dir, env, &out, "init", "-input=false", "-no-color"), out.String())
	out.Reset()
	require.NoError(t, tf.RunTofu(ctx, dir, env, &out, "apply", "-auto-approve", "-input=false", "-no-color"), out.String())
	out.Reset()
	require.NoError(t, tf.RunTofu(ctx, dir, env, &out, "output", "-json"), out.String())
	got := out.String()
	require.Contains(t, got, "MY-OWN-TEXT", "the module reads its own work dir")
	for p, v := range secrets {
		require.NotContains(t, got, v, "%s was readable in the sandbox", p)
	}
	// The state tofu wrote is in the real work dir, and the secrets are
	// untouched outside the sandbox.
	_, err := os.Stat(filepath.Join(dir, "terraform.tfstate"))
	require.NoError(t, err)
	for p, v := range secrets {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, v, string(b))
	}

	// Without the sandbox the same module reads them all: the test can fail.
	out.Reset()
	plain := Binary{Bin: tofu}
	require.NoError(t, plain.RunTofu(ctx, dir, env, &out, "apply", "-auto-approve", "-input=false", "-no-color"), out.String())
	out.Reset()
	require.NoError(t, plain.RunTofu(ctx, dir, env, &out, "output", "-json"), out.String())
	require.Contains(t, out.String(), "SECRET-SEAL-KEY")
}
