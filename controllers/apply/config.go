package apply

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// Validate reports every required field that is missing and every value
// that is out of range, in one error, so that a miswired server fails at
// start-up instead of at its first apply. Zero values that have a default
// are valid; Validate does not apply the defaults (NewWorker does).
func (c *Config) Validate() error {
	// Holder names this replica in the worker lease: two replicas without
	// names would both believe they hold it.
	var errs []error
	if err := controller.Required("", controller.Need("Store", c.Store), controller.Need("Cache", c.Cache),
		controller.Need("Bundles", c.Bundles), controller.Need("Logs", c.Logs), controller.Need("WorkDir", c.WorkDir),
		controller.Need("Credentials", c.Credentials), controller.Need("State", c.State), controller.Need("Holder", c.Holder),
		controller.Need("BackendURL", c.BackendURL)); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Tofu.CheckPaths(c.WorkDir)...)
	if u, err := url.Parse(c.BackendURL); c.BackendURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		errs = append(errs, fmt.Errorf("BackendURL %q is not an http(s) URL with a host", c.BackendURL))
	}
	// State is always encrypted: with the passphrase, else with a generated
	// key per tenant.
	if c.StatePassphrase == "" && c.StateKeys == nil {
		errs = append(errs, errors.New("StateKeys (or StatePassphrase) is required"))
	}
	if c.StatePassphrase != "" {
		if _, err := tofu.EncryptionConfig(c.StatePassphrase); err != nil {
			errs = append(errs, fmt.Errorf("StatePassphrase: %w", err))
		}
	}
	// Resync < 0 means off; every other duration has no meaning below zero.
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"Debounce", c.Debounce}, {"MaxDelay", c.MaxDelay}, {"Timeout", c.Timeout},
		{"BackoffBase", c.BackoffBase}, {"BackoffMax", c.BackoffMax}, {"BootstrapWait", c.BootstrapWait}, {"ObserveWait", c.ObserveWait},
		{"Tofu.Grace", c.Tofu.Grace}, {"DriftInterval", c.DriftInterval}, {"DriftMinInterval", c.DriftMinInterval},
	} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative (got %s)", d.field, d.value))
		}
	}
	if c.BackoffBase > 0 && c.BackoffMax > 0 && c.BackoffMax < c.BackoffBase {
		errs = append(errs, fmt.Errorf("BackoffMax (%s) must not be below BackoffBase (%s)", c.BackoffMax, c.BackoffBase))
	}
	if c.KeepApplies < 0 {
		errs = append(errs, fmt.Errorf("KeepApplies must not be negative (got %d)", c.KeepApplies))
	}
	if len(errs) > 0 {
		return fmt.Errorf("apply worker config: %w", errors.Join(errs...))
	}
	return nil
}
