package main

import (
	"path/filepath"
	"strings"
)

// absolutePaths makes every path serve was given absolute, taking a relative
// one from dir, where serve started. It runs once, before anything uses them:
// tofu runs in per-tenant working directories under the data dir, and a
// relative TF_CLI_CONFIG_FILE, mirror or binary handed to it would name a file
// under that directory instead (`--data-dir ./data` made every apply fail).
//
// --tofu is a path only when it holds a separator; a bare name is looked up
// on PATH, as a shell would.
func (cfg *serveConfig) absolutePaths(dir string) {
	for _, p := range []*string{
		&cfg.DataDir, &cfg.NATSCreds, &cfg.SecretsKeyFile,
		&cfg.TLS.CertFile, &cfg.TLS.KeyFile,
		&cfg.Infra.ProviderMirror, &cfg.Infra.KubeTools, &cfg.SSO.SecretFile,
	} {
		*p = absolute(dir, *p)
	}
	if strings.ContainsRune(cfg.Infra.Tofu, filepath.Separator) {
		cfg.Infra.Tofu = absolute(dir, cfg.Infra.Tofu)
	}
}

// absolute is p taken from dir when relative, cleaned; "" stays "" (a flag not given).
func absolute(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}
