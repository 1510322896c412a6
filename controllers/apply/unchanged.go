package apply

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/providers"
)

// A run of a tenant whose infrastructure tofu would leave as it is runs no
// tofu (issue 49): after an upgrade's version write-back, a re-sent spec, a
// label nothing generated reads, the apply worker compares what tofu would
// act on with what the last successful run of this work dir applied and,
// when nothing differs, records that on the tenant instead of an Apply.
//
// What tofu acts on (inputsDigest): the generated main.tf.json without the
// attributes its own lifecycle.ignore_changes lists (a machine's user data,
// a cloud's image: upgrades and config changes go through the Talos API),
// the variables' names and the keys of their maps (the machine names) but not
// their values (the day-0 machine configs, which tofu never changes on a
// built machine: ignore_changes on user_data, the module contract's
// "machines" input), the modules' files, the backend and the CLI
// configuration (the provider mirror). Besides that digest the decision looks
// at the state's revision (written since: by whom it does not matter) and
// the machines the state was projected into (the read model's Machine
// objects the worker made must still say what the state said).

// appliedFile records, in a tenant's work dir, what its last successful run
// applied. It is removed before tofu changes anything, so a run that dies
// (kill -9) leaves none and the next run runs tofu.
const appliedFile = ".rezus-applied"

// appliedRecord is the content of appliedFile.
type appliedRecord struct {
	// Inputs is the inputsDigest of the configuration the run applied.
	Inputs string `json:"inputs"`
	// StateRevision is the state's revision the run left (0: no state).
	StateRevision uint64 `json:"stateRevision"`
	// Machines is the machinesDigest of the machines the state held.
	Machines string `json:"machines"`
	// Apply and Generation name the run, for the tenant's condition.
	Apply      string `json:"apply"`
	Generation int64  `json:"generation"`
}

// tofuFacts is what decideTofu looks at.
type tofuFacts struct {
	// Last is the record of the last successful run (nil: none here).
	Last *appliedRecord
	// Inputs is the inputsDigest of the configuration now ("" when it could
	// not be made: the run reports why).
	Inputs string
	// StateRevision is the state's revision now.
	StateRevision uint64
	// Machines is the machinesDigest of the worker's Machine objects now.
	Machines string
	// Replacements is how many machine replacements wait (each a -replace).
	Replacements int
	// Metal says the tenant has metal node groups (built through the Talos
	// API on every run, not by tofu).
	Metal bool
	// Drift says the run corrects drift a check found.
	Drift bool
}

// decideTofu answers whether a run must run tofu, and why. It is pure, so
// every case is table-tested; unknown is always "run".
func decideTofu(f tofuFacts) (run bool, reason string) {
	switch {
	case f.Drift:
		return true, "a drift check found the infrastructure changed"
	case f.Last == nil:
		return true, "no successful run of this tenant is recorded in this work dir"
	case f.Metal:
		return true, "metal node groups are built on every run"
	case f.Replacements != 0:
		return true, fmt.Sprintf("%d machine replacements wait", f.Replacements)
	case f.Inputs == "":
		return true, "the configuration could not be made"
	case f.Inputs != f.Last.Inputs:
		return true, "the configuration tofu acts on changed"
	case f.StateRevision != f.Last.StateRevision:
		return true, fmt.Sprintf("the state changed since apply %s (revision %d, now %d)", f.Last.Apply, f.Last.StateRevision, f.StateRevision)
	case f.Machines != f.Last.Machines:
		return true, "the machines recorded differ from the ones the state held"
	}
	return false, fmt.Sprintf("nothing tofu acts on changed since apply %s", f.Last.Apply)
}

// inputsDigest is the digest of what tofu acts on in a configuration (see
// the top of this file). backend and cli are the backend configuration and
// the CLI configuration files.
func inputsDigest(files providers.Files, backend, cli []byte) (string, error) {
	var top map[string]any
	if err := json.Unmarshal(files.Main, &top); err != nil {
		return "", fmt.Errorf("generator bug: %s is not JSON: %w", mainFile, err)
	}
	stripIgnoredChanges(top)
	stripDayZeroConfigs(top)
	main, err := json.Marshal(top) // map keys sorted: the same configuration, the same bytes
	if err != nil {
		return "", err
	}
	vars := map[string]any{}
	if len(files.Vars) > 0 {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(files.Vars, &raw); err != nil {
			return "", fmt.Errorf("generator bug: %s is not JSON: %w", varsFile, err)
		}
		for name, v := range raw {
			var m map[string]json.RawMessage
			if json.Unmarshal(v, &m) == nil {
				vars[name] = slices.Sorted(maps.Keys(m))
				continue
			}
			// Not a map of machine configs: its value counts.
			sum := sha256.Sum256(v)
			vars[name] = hex.EncodeToString(sum[:])
		}
	}
	varsJSON, err := json.Marshal(vars)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, part := range [][]byte{main, varsJSON, backend, cli} {
		fmt.Fprintf(h, "%d\n", len(part))
		h.Write(part)
	}
	for _, p := range slices.Sorted(maps.Keys(files.Modules)) {
		for _, f := range slices.Sorted(maps.Keys(files.Modules[p])) {
			fmt.Fprintf(h, "module %s/%s %d\n", p, f, len(files.Modules[p][f]))
			h.Write([]byte(files.Modules[p][f]))
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stripIgnoredChanges removes from every resource of a JSON configuration
// the attributes its lifecycle.ignore_changes names: tofu does not act on
// them once the resource exists (and a new resource is a new key).
func stripIgnoredChanges(top map[string]any) {
	types, _ := top["resource"].(map[string]any)
	for _, byName := range types {
		resources, _ := byName.(map[string]any)
		for _, r := range resources {
			body, _ := r.(map[string]any)
			lc, _ := body["lifecycle"].(map[string]any)
			ignored, _ := lc["ignore_changes"].([]any)
			for _, a := range ignored {
				if name, ok := a.(string); ok && name != "lifecycle" {
					delete(body, name)
				}
			}
		}
	}
}

// stripDayZeroConfigs removes from every module call the config of each
// machine in its "machines" input: by the module contract a machine's
// config is its day-0 user data (the emulated module ignores its changes,
// as the built-in resources do), and the expression differs once the
// endpoint a first run made replaces the placeholder in it.
func stripDayZeroConfigs(top map[string]any) {
	calls, _ := top["module"].(map[string]any)
	for _, c := range calls {
		body, _ := c.(map[string]any)
		machines, _ := body[providers.ModuleVarMachines].(map[string]any)
		for _, m := range machines {
			if fields, ok := m.(map[string]any); ok {
				delete(fields, "config")
			}
		}
	}
}

// machineKey is what the state says of a machine the worker made.
type machineKey struct {
	Name       string `json:"name"`
	NodeGroup  string `json:"nodeGroup"`
	Address    string `json:"address"`
	ProviderID string `json:"providerID"`
	Shape      string `json:"shape"`
	Hostname   string `json:"hostname"`
}

// machinesDigest is the digest of a set of machines, in any order.
func machinesDigest(ms []machineKey) string {
	sorted := slices.Clone(ms)
	slices.SortFunc(sorted, func(a, b machineKey) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	b, _ := json.Marshal(sorted)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// observedKeys are the machines a state projected into.
func observedKeys(observed []providers.ObservedMachine) []machineKey {
	out := make([]machineKey, 0, len(observed))
	for _, o := range observed {
		out = append(out, machineKey{Name: o.Name, NodeGroup: o.NodeGroup, Address: o.Address,
			ProviderID: o.ProviderID, Shape: o.Shape, Hostname: o.Hostname})
	}
	return out
}

// recordedKeys are the Machine objects the worker made from a state
// (ManagedByLabel), as machineKeys.
func recordedKeys(ms []domain.Machine) []machineKey {
	var out []machineKey
	for _, m := range ms {
		if m.Metadata.Labels[ManagedByLabel] != managedByValue {
			continue
		}
		out = append(out, machineKey{Name: m.Metadata.Name, NodeGroup: m.Spec.NodeGroup, Address: m.Spec.Address,
			ProviderID: m.Spec.ProviderID, Shape: m.Spec.Shape, Hostname: m.Spec.Hostname})
	}
	return out
}
