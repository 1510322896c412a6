package domain

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrModuleInvalid says a module provider's module failed `tofu validate`.
var ErrModuleInvalid = errors.New("the module does not validate")

// CheckModules refuses a run that needs a module provider whose module
// failed `tofu validate` at its current generation, with tofu's diagnostics
// and the Provider's name, instead of letting tofu fail somewhere in the run.
// A module not validated yet runs (tofu reports the same errors, if any).
func CheckModules(byName map[string]*Provider) error {
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		p := byName[name]
		if p.Spec.Type != ProviderModule {
			continue
		}
		c := FindCondition(p.Status.Conditions, ConditionValidated)
		if c != nil && c.Status == "False" && c.ObservedGeneration == p.Metadata.Generation {
			return fmt.Errorf("provider %s: %w (Validated=False, %s): %s", name, ErrModuleInvalid, c.Reason, strings.ReplaceAll(c.Message, "\n", "; "))
		}
	}
	return nil
}
