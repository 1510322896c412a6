package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// configFile is the CLI's configuration: named contexts (a server and the
// credentials for it) and which one is current. It holds bearer tokens, so it
// is written mode 0600 in directories created 0700.
type configFile struct {
	CurrentContext string          `yaml:"current-context,omitempty"`
	Contexts       []*contextEntry `yaml:"contexts,omitempty"`
}

// contextEntry is one named context.
type contextEntry struct {
	Name string `yaml:"name"`
	// Server is the base URL, e.g. https://rezus.example:8443.
	Server string `yaml:"server,omitempty"`
	// Token is the bearer token: a login session's JWT or an API token.
	Token string `yaml:"token,omitempty"`
	// CertificateAuthority is a PEM file of CAs to trust for the server instead of the system's.
	CertificateAuthority string `yaml:"certificateAuthority,omitempty"`
	// InsecureSkipTLSVerify turns certificate checks off (test servers only).
	InsecureSkipTLSVerify bool `yaml:"insecureSkipTLSVerify,omitempty"`
	// Tenant is the default --tenant for tenant-scoped kinds.
	Tenant string `yaml:"tenant,omitempty"`
}

// configPath is $REZUSCONFIG, else ~/.config/rezus/config.
func configPath(getenv func(string) string) (string, error) {
	if p := getenv("REZUSCONFIG"); p != "" {
		return p, nil
	}
	home := getenv("HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the config file: set REZUSCONFIG or HOME: %w", err)
		}
		home = h
	}
	return filepath.Join(home, ".config", "rezus", "config"), nil
}

// loadConfig reads the config file; a missing file is an empty config.
func loadConfig(path string) (*configFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &configFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading config %s: %w", path, err)
	}
	cfg := &configFile{}
	if err := yaml.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("reading config %s: %w", path, err)
	}
	for i, c := range cfg.Contexts {
		if c == nil || c.Name == "" {
			return nil, fmt.Errorf("reading config %s: context %d has no name", path, i)
		}
	}
	return cfg, nil
}

// save writes the config atomically (temporary file and rename), mode 0600,
// creating missing directories 0700.
func (cfg *configFile) save(path string) error {
	b, err := encodeYAML(cfg)
	if err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	return writeFileAtomic(path, b)
}

// writeFileAtomic writes data to path with mode 0600 through a temporary file
// in the same directory, so readers never see half a file and an existing
// file's looser mode does not survive.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// context returns the named context, or nil.
func (cfg *configFile) context(name string) *contextEntry {
	for _, c := range cfg.Contexts {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// ensureContext returns the named context, adding it when missing.
func (cfg *configFile) ensureContext(name string) *contextEntry {
	if c := cfg.context(name); c != nil {
		return c
	}
	c := &contextEntry{Name: name}
	cfg.Contexts = append(cfg.Contexts, c)
	return c
}

// deleteContext removes a context; it reports whether there was one.
func (cfg *configFile) deleteContext(name string) bool {
	for i, c := range cfg.Contexts {
		if c.Name == name {
			cfg.Contexts = append(cfg.Contexts[:i], cfg.Contexts[i+1:]...)
			if cfg.CurrentContext == name {
				cfg.CurrentContext = ""
			}
			return true
		}
	}
	return false
}
