//go:build !e2e && !browser

package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// TestSandboxHidesEverySecretFile: issue 42, finding 4. tofu's sandbox hid
// the seal key, the TLS key and the NATS credentials, but not
// --oidc-client-secret-file: a module read the single sign-on client secret
// with file(). Every string flag of serve is classified here, so that one
// added later without saying whether it names a secret file fails this test;
// each secret file given is in the sandbox's HideFiles.
func TestSandboxHidesEverySecretFile(t *testing.T) {
	secretFiles := map[string]bool{"secrets-key-file": true, "tls-key": true, "nats-creds": true, "oidc-client-secret-file": true}
	notSecretFiles := map[string]string{
		"listen": "", "nats-url": "", "nats-listen": "", "log-level": "", "trusted-proxies": "",
		"data-dir":    "hidden whole",
		"admin-token": "a value, in the server's memory and environment, which tofu's PID namespace does not show",
		"tls-cert":    "public", "cpu-profile": "written, not read", "mem-profile": "written, not read",
		"tofu": "", "provider-mirror": "", "tofu-sandbox": "", "emulator-kube": "", "kube-tools": "",
		"image-factory": "", "emulator-listen": "", "cluster-name": "", "cluster-listen": "", "peers": "",
		"node-name": "", "all-peers": "", "oidc-issuer": "", "oidc-client-id": "", "oidc-groups-claim": "", "oidc-scopes": "",
		"external-url": "", "metal-networks": "", "cluster-advertise": "",
		"autoscaler-listen": "", "autoscaler-hosts": "", "autoscaler-endpoint": "", // addresses; the CA key is in the sealed secrets
		"emulator-env": "its token is the emulated Provider's credential, which tofu is given anyway (EMULATOR_TOKEN)",
	}
	base := t.TempDir()
	var args []string
	for _, f := range serveCommand().Flags {
		sf, ok := f.(*cli.StringFlag)
		if !ok {
			continue
		}
		_, plain := notSecretFiles[sf.Name]
		if !secretFiles[sf.Name] {
			require.True(t, plain, "--%s: say in this test whether it names a file of secrets (then tofuSandbox must hide it)", sf.Name)
			continue
		}
		p := filepath.Join(base, "secrets", sf.Name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte("SECRET"), 0o600))
		args = append(args, "--"+sf.Name, p)
	}
	cfg := parseServe(t, append(args, "--data-dir", filepath.Join(base, "data"), "--tofu-sandbox", "on")...)
	sb, err := tofuSandbox(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), cfg, filepath.Join(base, "data", "tofu"))
	require.NoError(t, err)
	for i := 0; i < len(args); i += 2 {
		require.Contains(t, sb.HideFiles, args[i+1], "%s is not hidden from tofu", args[i])
	}
	require.Len(t, sb.HideFiles, len(secretFiles))
}
