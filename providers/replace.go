package providers

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// StateSerial is the state's serial, which every write of it increases
// (0 for no state).
func StateSerial(state []byte) (int64, error) {
	st, err := parseState(state)
	if err != nil {
		return 0, err
	}
	return st.Serial, nil
}

// ErrMachineNotInState says a machine has no resource in the state.
var ErrMachineNotInState = errors.New("the machine is not in the state")

// ReplaceAddresses are the resource instances that make machine of node
// group in a state, as `tofu apply -replace=` takes them: every managed
// instance whose index key is the machine's name, in the group's own
// resources (GroupResourceName) or in its module call (ModuleName, whatever
// the module builds per machine: a server, its volume, its port). Replacing
// them builds a new machine of the same name with a fresh day-0 config.
// None found is an error: the machine is not in the state.
func ReplaceAddresses(state []byte, group, machine string) ([]string, error) {
	st, err := parseState(state)
	if err != nil {
		return nil, err
	}
	key, _ := json.Marshal(machine)
	var out []string
	for _, r := range st.Resources {
		if r.Mode != "managed" || !ofGroup(r, group) {
			continue
		}
		for _, inst := range r.Instances {
			if inst.Deposed != "" || string(inst.IndexKey) != string(key) {
				continue
			}
			addr := r.Type + "." + r.Name + "[" + string(key) + "]"
			if r.Module != "" {
				addr = r.Module + "." + addr
			}
			out = append(out, addr)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no resource of machine %s of node group %s", ErrMachineNotInState, machine, group)
	}
	return out, nil
}

// ofGroup reports whether a state resource belongs to node group group.
func ofGroup(r tfStateResource, group string) bool {
	if r.Module == "" {
		g, ok := GroupFromResourceName(r.Name)
		return ok && g == group
	}
	call, _, _ := strings.Cut(strings.TrimPrefix(r.Module, "module."), ".")
	g, _, ok := ParseModuleName(call)
	return ok && g == group
}
