package tfprovider

import (
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// rezusctlContext is a context of rezusctl's config file (cmd/rezusctl
// config.go writes it).
type rezusctlContext struct {
	Name                  string `yaml:"name"`
	Server                string `yaml:"server"`
	Token                 string `yaml:"token"`
	CertificateAuthority  string `yaml:"certificateAuthority"`
	InsecureSkipTLSVerify bool   `yaml:"insecureSkipTLSVerify"`
}

// loadContext reads the named context of $REZUSCONFIG, else
// ~/.config/rezus/config.
func loadContext(getenv func(string) string, name string) (*rezusctlContext, error) {
	p := getenv("REZUSCONFIG")
	if p == "" {
		home := getenv("HOME")
		if home == "" {
			return nil, fmt.Errorf("set REZUSCONFIG or HOME to find rezusctl's config")
		}
		p = filepath.Join(home, ".config", "rezus", "config")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading rezusctl's config: %w", err)
	}
	var cfg struct {
		Contexts []rezusctlContext `yaml:"contexts"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("reading rezusctl's config %s: %w", p, err)
	}
	for i := range cfg.Contexts {
		if cfg.Contexts[i].Name == name {
			return &cfg.Contexts[i], nil
		}
	}
	return nil, fmt.Errorf("rezusctl's config %s has no context %q", p, name)
}
