package talos_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/talos"
)

// TestRedactSecretsLeavesNoKey replays finding 1 of the 2026-12-06 review on
// the rendered configs of every supported Talos version: what an editor
// reads holds no private key, token or secret, names each one it left out,
// still loads, and differs from the full config only on those lines.
func TestRedactSecretsLeavesNoKey(t *testing.T) {
	for _, tc := range []struct {
		file    string
		leftOut []string
	}{
		{"v1.13.0/controlplane.yaml", []string{"machine.token", "machine.ca.key", "cluster.secret", "cluster.token",
			"cluster.secretboxEncryptionSecret", "cluster.ca.key", "cluster.aggregatorCA.key", "cluster.serviceAccount.key", "cluster.etcd.ca.key"}},
		{"v1.13.0/worker-w1.yaml", []string{"machine.token", "cluster.secret", "cluster.token"}},
		{"v1.12.0/controlplane.yaml", []string{"machine.token", "machine.ca.key", "cluster.secret", "cluster.token",
			"cluster.secretboxEncryptionSecret", "cluster.ca.key", "cluster.aggregatorCA.key", "cluster.serviceAccount.key", "cluster.etcd.ca.key"}},
		{"v1.12.0/worker-template.yaml", []string{"machine.token", "cluster.secret", "cluster.token"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			full, err := os.ReadFile(filepath.Join("testdata", tc.file))
			require.NoError(t, err)
			out, leftOut, err := talos.RedactSecrets(full)
			require.NoError(t, err)
			require.ElementsMatch(t, tc.leftOut, leftOut)
			talostest.RequireNoKeyMaterial(t, out)

			// Only the secrets' lines differ, each now an empty value.
			fl, ol := strings.Split(string(full), "\n"), strings.Split(string(out), "\n")
			require.Len(t, ol, len(fl))
			changed := 0
			for i := range fl {
				if fl[i] != ol[i] {
					changed++
					k, _, ok := strings.Cut(strings.TrimSpace(fl[i]), ":")
					require.True(t, ok, fl[i])
					require.Equal(t, strings.Repeat(" ", len(fl[i])-len(strings.TrimLeft(fl[i], " ")))+k+`: ""`, ol[i])
				}
			}
			require.Equal(t, len(tc.leftOut), changed)

			cfg, err := configloader.NewFromBytes(append(talos.RedactionHeader(leftOut), out...))
			require.NoError(t, err, "a redacted config still loads")
			require.NotEmpty(t, cfg.Machine().Security().IssuingCA().Crt, "certificates stay")
			require.Empty(t, cfg.Machine().Security().IssuingCA().Key)
		})
	}
}

// TestRedactSecretsFindsKeysAnywhere: a private key a patch put elsewhere
// (a file's content, a list) is left out too, plain PEM or base64.
func TestRedactSecretsFindsKeysAnywhere(t *testing.T) {
	pemKey := "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----\n"
	in := "version: v1alpha1\nmachine:\n    files:\n        - content: " + quote(pemKey) + "\n          path: /var/k.pem\n" +
		"    certSANs:\n        - " + base64.StdEncoding.EncodeToString([]byte(pemKey)) + "\n" +
		"---\napiVersion: v1alpha1\nkind: WireguardConfig\nname: wg0\nprivateKey: c2VjcmV0\n"
	out, leftOut, err := talos.RedactSecrets([]byte(in))
	require.NoError(t, err)
	require.Equal(t, []string{"machine.files[0].content", "machine.certSANs[0]", "WireguardConfig(wg0).privateKey"}, leftOut)
	talostest.RequireNoKeyMaterial(t, out)
	require.NotContains(t, string(out), "c2VjcmV0")
	require.Contains(t, string(out), "path: /var/k.pem")
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, "\n", `\n`) + `"` }
