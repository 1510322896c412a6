//go:build !e2e && !browser

package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// parseServe runs serve's flag parsing on args and returns the config serve
// would run with, without serving.
func parseServe(t *testing.T, args ...string) serveConfig {
	t.Helper()
	cmd := serveCommand()
	var got serveConfig
	cmd.Action = func(c *cli.Context) error {
		cfg, err := serveConfigFrom(c)
		got = cfg
		return err
	}
	app := &cli.App{Name: "rezuscloud", Commands: []*cli.Command{cmd}}
	require.NoError(t, app.Run(append([]string{"rezuscloud", "serve"}, args...)))
	return got
}

// TestServePathFlagsAreAbsolute: each path flag given relative (as the README's
// quick start gives --data-dir ./data and --tofu .tools/bin/tofu) comes out
// taken from the working directory, absolute and clean, whatever directory a
// part later works in.
func TestServePathFlagsAreAbsolute(t *testing.T) {
	cwd, err := os.Getwd()
	require.NoError(t, err)
	for _, tc := range []struct {
		flag, value string
		field       func(serveConfig) string
		want        string
	}{
		{"--data-dir", "./data", func(c serveConfig) string { return c.DataDir }, filepath.Join(cwd, "data")},
		{"--data-dir", "/var/lib/rezus", func(c serveConfig) string { return c.DataDir }, "/var/lib/rezus"},
		{"--tofu", ".tools/bin/tofu", func(c serveConfig) string { return c.Infra.Tofu }, filepath.Join(cwd, ".tools/bin/tofu")},
		{"--tofu", "../bin/tofu", func(c serveConfig) string { return c.Infra.Tofu }, filepath.Join(filepath.Dir(cwd), "bin/tofu")},
		// A bare name is looked up on PATH, not in the working directory.
		{"--tofu", "tofu", func(c serveConfig) string { return c.Infra.Tofu }, "tofu"},
		{"--provider-mirror", ".tools/mirror", func(c serveConfig) string { return c.Infra.ProviderMirror }, filepath.Join(cwd, ".tools/mirror")},
		{"--secrets-key-file", "keys/seal.key", func(c serveConfig) string { return c.SecretsKeyFile }, filepath.Join(cwd, "keys/seal.key")},
		{"--tls-cert", "tls/a.crt", func(c serveConfig) string { return c.TLS.CertFile }, filepath.Join(cwd, "tls/a.crt")},
		{"--tls-key", "tls/a.key", func(c serveConfig) string { return c.TLS.KeyFile }, filepath.Join(cwd, "tls/a.key")},
		{"--nats-creds", "nats.creds", func(c serveConfig) string { return c.NATSCreds }, filepath.Join(cwd, "nats.creds")},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			cfg := parseServe(t, tc.flag, tc.value)
			require.Equal(t, tc.want, tc.field(cfg))
		})
	}
	t.Run("the default data dir", func(t *testing.T) {
		require.Equal(t, filepath.Join(cwd, "data"), parseServe(t).DataDir)
	})
	t.Run("environment variables", func(t *testing.T) {
		t.Setenv("REZUSCLOUD_DATA_DIR", "rel/data")
		t.Setenv("REZUSCLOUD_PROVIDER_MIRROR", "rel/mirror")
		cfg := parseServe(t)
		require.Equal(t, filepath.Join(cwd, "rel/data"), cfg.DataDir)
		require.Equal(t, filepath.Join(cwd, "rel/mirror"), cfg.Infra.ProviderMirror)
	})
}

// TestNoServeFlagLeavesARelativePath gives every string flag of serve a
// relative path and fails when one reaches the config still relative: a path
// flag added later without being made absolute is caught here, not by a user.
func TestNoServeFlagLeavesARelativePath(t *testing.T) {
	var args []string
	for _, f := range serveCommand().Flags {
		// CIDRs, checked; --emulator-env is a file read at start (its path is not kept).
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name != "trusted-proxies" && sf.Name != "metal-networks" && sf.Name != "emulator-env" {
			args = append(args, "--"+sf.Name, "rel/"+sf.Name)
		}
	}
	cfg := parseServe(t, args...)
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				walk(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(path, v.Index(i))
			}
		case reflect.String:
			s := v.String()
			if !strings.HasPrefix(s, "rel/") {
				return
			}
			// Flags that are not paths: addresses, names, levels.
			switch s {
			case "rel/listen", "rel/nats-url", "rel/nats-listen", "rel/log-level", "rel/admin-token",
				"rel/cluster-name", "rel/cluster-listen", "rel/peers", "rel/all-peers", "rel/node-name",
				"rel/emulator-listen", "rel/tofu-sandbox", "rel/emulator-kube", "rel/image-factory",
				"rel/oidc-issuer", "rel/oidc-client-id", "rel/oidc-groups-claim", "rel/oidc-scopes", "rel/external-url",
				"rel/cluster-advertise", "rel/autoscaler-listen", "rel/autoscaler-hosts", "rel/autoscaler-endpoint":
				return
			}
			t.Errorf("%s is %q: a path flag left relative", path, s)
		}
	}
	walk("serveConfig", reflect.ValueOf(cfg))
}

// TestTrustedProxiesFlag: CIDRs are parsed at start; anything else is an
// error naming the flag.
func TestTrustedProxiesFlag(t *testing.T) {
	cfg := parseServe(t, "--trusted-proxies", "10.0.0.0/8, 192.0.2.7/32")
	require.Len(t, cfg.TrustedProxies, 2)
	require.Equal(t, "10.0.0.0/8", cfg.TrustedProxies[0].String())
	require.Equal(t, "192.0.2.7/32", cfg.TrustedProxies[1].String())
	require.Empty(t, parseServe(t).TrustedProxies)

	cmd := serveCommand()
	cmd.Action = func(c *cli.Context) error { _, err := serveConfigFrom(c); return err }
	app := &cli.App{Name: "rezuscloud", Commands: []*cli.Command{cmd}}
	err := app.Run([]string{"rezuscloud", "serve", "--trusted-proxies", "10.0.0.1"})
	require.ErrorContains(t, err, `--trusted-proxies: "10.0.0.1" is not a CIDR`)
}
