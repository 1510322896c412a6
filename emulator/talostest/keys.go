package talostest

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// RequireNoKeyMaterial fails when text (a machine config, or a diff of one)
// holds a private key, plain or base64 (as machinery writes keys), or a
// non-empty token or secret: what talos.RedactSecrets leaves out.
func RequireNoKeyMaterial(t testing.TB, text []byte) {
	t.Helper()
	require.NotContains(t, string(text), "PRIVATE KEY")
	for _, line := range strings.Split(string(text), "\n") {
		k, v, ok := strings.Cut(strings.TrimLeft(strings.TrimSpace(line), "+- "), ":")
		if !ok {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		switch k {
		case "key", "token", "secret", "secretboxEncryptionSecret", "aescbcEncryptionSecret":
			require.Empty(t, v, "line %q", line)
		}
		if raw, err := base64.StdEncoding.DecodeString(v); err == nil {
			require.NotContains(t, string(raw), "PRIVATE KEY", "line %q", line)
		}
	}
}
