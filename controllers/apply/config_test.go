package apply

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/tofu"
)

type noBundles struct{}

func (noBundles) Bundle(context.Context, string) (*secrets.Bundle, error) { return nil, nil }

func TestConfigValidate(t *testing.T) {
	fake := newFakeTofu(nil)
	valid := func() Config {
		return Config{Store: &eventstore.Store{}, Cache: &projections.Cache{}, Bundles: noBundles{}, Logs: &tofu.Logs{},
			WorkDir: "/var/lib/rezuscloud/tofu", BackendURL: "http://127.0.0.1:8080", Credentials: fake, State: fake, Holder: "host-1", StateKeys: fake}
	}
	tests := []struct {
		name   string
		change func(c *Config)
		errs   []string // each must be in the error; none: valid
	}{
		{"the required fields, every default", func(*Config) {}, nil},
		{"every field set", func(c *Config) {
			c.BackendURL, c.BackendCAPEM, c.StatePassphrase = "https://rezus.example.com:8443/", "PEM", "a long enough passphrase"
			c.Debounce, c.MaxDelay, c.Timeout, c.BootstrapWait = time.Second, time.Minute, time.Hour, time.Minute
			c.BackoffBase, c.BackoffMax, c.KeepApplies, c.Concurrency = time.Second, time.Second, 5, 8
		}, nil},
		{"resync off", func(c *Config) { c.Resync = -1 }, nil},
		{"nothing set reports every required field", func(c *Config) { *c = Config{} }, []string{
			"Store is required", "Cache is required", "Bundles is required", "Logs is required", "WorkDir is required",
			"BackendURL is required", "Credentials is required", "State is required", "Holder is required",
			"StateKeys (or StatePassphrase) is required"}},
		{"a passphrase instead of state keys", func(c *Config) { c.StateKeys, c.StatePassphrase = nil, "a long enough passphrase" }, nil},
		{"backend URL without a scheme", func(c *Config) { c.BackendURL = "127.0.0.1:8080" }, []string{`BackendURL "127.0.0.1:8080" is not an http(s) URL`}},
		{"backend URL of another scheme", func(c *Config) { c.BackendURL = "nats://127.0.0.1:4222" }, []string{"BackendURL"}},
		{"backend URL without a host", func(c *Config) { c.BackendURL = "http:///tfstate" }, []string{"BackendURL"}},
		{"short passphrase", func(c *Config) { c.StatePassphrase = "short" }, []string{"StatePassphrase: the state passphrase must be at least"}},
		{"negative durations", func(c *Config) {
			c.Debounce, c.MaxDelay, c.Timeout, c.BackoffBase, c.BackoffMax, c.BootstrapWait, c.Tofu.Grace = -1, -1, -1, -1, -1, -1, -1
		}, []string{"Debounce must not be negative", "MaxDelay must not be negative", "Timeout must not be negative",
			"BackoffBase must not be negative", "BackoffMax must not be negative", "BootstrapWait must not be negative",
			"Tofu.Grace must not be negative"}},
		{"backoff cap below its base", func(c *Config) { c.BackoffBase, c.BackoffMax = time.Minute, time.Second }, []string{"BackoffMax (1s) must not be below BackoffBase (1m0s)"}},
		// tofu runs in per-tenant directories under WorkDir: a relative path
		// there names another file (the README's --data-dir ./data failed so).
		{"relative paths", func(c *Config) {
			c.WorkDir, c.Tofu.Mirror, c.Tofu.Bin = "data/tofu", ".tools/mirror", ".tools/bin/tofu"
		},
			[]string{`WorkDir "data/tofu" must be an absolute path`, `Tofu.Mirror ".tools/mirror" must be an absolute path`,
				`Tofu.Bin ".tools/bin/tofu" must be an absolute path`}},
		{"tofu by name on PATH", func(c *Config) { c.Tofu.Bin, c.Tofu.Mirror = "tofu", "/opt/mirror" }, nil},
		{"negative KeepApplies", func(c *Config) { c.KeepApplies = -1 }, []string{"KeepApplies must not be negative"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.change(&c)
			err := c.Validate()
			if len(tc.errs) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "apply worker config: ")
			for _, want := range tc.errs {
				require.ErrorContains(t, err, want)
			}
		})
	}
}
