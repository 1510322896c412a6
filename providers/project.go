package providers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ObservedMachine is one machine as the infrastructure's state describes it.
type ObservedMachine struct {
	// Name is the machine's name, "<nodegroup>-<index>" (the instance's index key).
	Name       string
	NodeGroup  string
	Address    string
	ProviderID string
	Shape      string
	Hostname   string
}

// tfState is the part of tofu's state (format version 4, as `tofu state
// pull` prints it) that the projection reads.
type tfState struct {
	Version *int `json:"version"`
	// Serial grows with every write of the state.
	Serial    int64                    `json:"serial"`
	Resources []tfStateResource        `json:"resources"`
	Outputs   map[string]tfStateOutput `json:"outputs"`
	// EncryptedData is set when the state is encrypted (OpenTofu state
	// encryption); the projection needs it decrypted.
	EncryptedData json.RawMessage `json:"encrypted_data"`
}

type tfStateResource struct {
	Module    string            `json:"module"`
	Mode      string            `json:"mode"`
	Type      string            `json:"type"`
	Name      string            `json:"name"`
	Provider  string            `json:"provider"`
	Instances []tfStateInstance `json:"instances"`
}

type tfStateInstance struct {
	IndexKey   json.RawMessage `json:"index_key"`
	Deposed    string          `json:"deposed"`
	Attributes map[string]any  `json:"attributes"`
}

type tfStateOutput struct {
	Value json.RawMessage `json:"value"`
}

// parseState reads a state; no state at all (empty input, as `tofu state pull`
// prints when there is none) is an empty state.
func parseState(state []byte) (*tfState, error) {
	var st tfState
	if len(bytes.TrimSpace(state)) == 0 {
		return &st, nil
	}
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("the state is not JSON: %w", err)
	}
	if len(st.EncryptedData) > 0 {
		return nil, fmt.Errorf("the state is encrypted; read it decrypted (tofu state pull with TF_ENCRYPTION set)")
	}
	if st.Version == nil || *st.Version != 4 {
		v := "none"
		if st.Version != nil {
			v = fmt.Sprint(*st.Version)
		}
		return nil, fmt.Errorf("state format version %s is not supported (want 4)", v)
	}
	return &st, nil
}

// ProjectState turns a tofu state (v4 JSON, unencrypted) into the machines it
// holds: the instances of every node group resource (GroupResourceName) whose
// type a provider type declares as a machine (MachineMapping), read through
// that mapping. The node group comes from the resource name, the machine name
// from the instance's index key. Instances being replaced (deposed) are left
// out; the current one stands for the machine. Machines are sorted by name.
func ProjectState(state []byte) ([]ObservedMachine, error) {
	st, err := parseState(state)
	if err != nil {
		return nil, err
	}
	mappings := mappingsByResourceType()
	var out []ObservedMachine
	seen := map[string]string{}
	for _, r := range st.Resources {
		if r.Mode != "managed" || r.Module != "" {
			continue
		}
		mp, ok := mappings[r.Type]
		if !ok {
			continue
		}
		group, ok := GroupFromResourceName(r.Name)
		if !ok {
			continue
		}
		for _, inst := range r.Instances {
			if inst.Deposed != "" {
				continue
			}
			var name string
			if err := json.Unmarshal(inst.IndexKey, &name); err != nil || name == "" {
				return nil, fmt.Errorf("%s.%s: an instance's index key is %s, want a machine name", r.Type, r.Name, string(inst.IndexKey))
			}
			if prev, dup := seen[name]; dup {
				return nil, fmt.Errorf("machine %s is both %s and %s.%s", name, prev, r.Type, r.Name)
			}
			seen[name] = r.Type + "." + r.Name
			m := ObservedMachine{Name: name, NodeGroup: group,
				ProviderID: stringAttr(inst.Attributes, mp.ProviderIDAttr),
				Hostname:   stringAttr(inst.Attributes, mp.HostnameAttr),
				Shape:      mp.Shape,
			}
			for _, a := range mp.AddressAttrs {
				if m.Address = stringAttr(inst.Attributes, a); m.Address != "" {
					break
				}
			}
			if mp.ShapeAttr != "" {
				m.Shape = stringAttr(inst.Attributes, mp.ShapeAttr)
			}
			out = append(out, m)
		}
	}
	for _, oname := range sortedKeys(st.Outputs) {
		rest, ok := strings.CutPrefix(oname, moduleMachinesOutput)
		if !ok {
			continue
		}
		group, ok := GroupFromResourceName(rest)
		if !ok {
			continue
		}
		ms, err := moduleMachines(st.Outputs[oname].Value)
		if err != nil {
			return nil, fmt.Errorf("node group %s: the module's %q output: %w", group, ModuleOutputMachines, err)
		}
		for _, name := range sortedKeys(ms) {
			if prev, dup := seen[name]; dup {
				return nil, fmt.Errorf("machine %s is both %s and output %s", name, prev, oname)
			}
			seen[name] = "output " + oname
			m := ms[name]
			out = append(out, ObservedMachine{Name: name, NodeGroup: group, Address: m.Address, ProviderID: m.ProviderID, Shape: m.Shape, Hostname: m.Hostname})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// moduleMachine is one entry of a module's machines output.
type moduleMachine struct {
	Address    string `json:"address"`
	ProviderID string `json:"provider_id"`
	Shape      string `json:"shape"`
	Hostname   string `json:"hostname"`
}

// moduleMachines reads a module's machines output: a map (object) of machine
// name to {address, provider_id, shape?, hostname?}; null is no machines.
func moduleMachines(raw json.RawMessage) (map[string]moduleMachine, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var byName map[string]json.RawMessage
	if err := json.Unmarshal(raw, &byName); err != nil {
		return nil, fmt.Errorf("want an object of machine name to {address, provider_id}, got %.80s", string(raw))
	}
	out := make(map[string]moduleMachine, len(byName))
	for name, v := range byName {
		var fields map[string]any
		if err := json.Unmarshal(v, &fields); err != nil || fields == nil {
			return nil, fmt.Errorf("machine %s: want an object {address, provider_id, shape?, hostname?}", name)
		}
		var m moduleMachine
		for k, dst := range map[string]*string{"address": &m.Address, "provider_id": &m.ProviderID, "shape": &m.Shape, "hostname": &m.Hostname} {
			switch x := fields[k].(type) {
			case nil:
			case string:
				*dst = x
			default:
				return nil, fmt.Errorf("machine %s: %s must be a string", name, k)
			}
		}
		out[name] = m
	}
	return out, nil
}

// stringAttr is a string attribute, "" when absent, null or not a string.
func stringAttr(attrs map[string]any, name string) string {
	if name == "" {
		return ""
	}
	s, _ := attrs[name].(string)
	return s
}

// ProvidersInState returns the names of the Provider objects the state's
// resources (and data sources) use, sorted: every provider address must be
// an aliased one, provider["<source>"].<ProviderAlias(name)>, as Generate
// writes them. A destroy, or an apply after a node group went away, needs a
// provider block for each of them.
func ProvidersInState(state []byte) ([]string, error) {
	st, err := parseState(state)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, r := range st.Resources {
		if len(r.Instances) == 0 {
			continue
		}
		if r.Module != "" {
			_, provider, ok := ParseModuleName(moduleRoot(r.Module))
			if !ok {
				return nil, fmt.Errorf("%s.%s.%s: module %q is not a call RezusCloud writes", r.Module, r.Type, r.Name, r.Module)
			}
			names[provider] = true
			continue
		}
		alias, err := providerAliasOf(r.Provider)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", r.Type, r.Name, err)
		}
		name, ok := ProviderNameFromAlias(alias)
		if !ok {
			return nil, fmt.Errorf("%s.%s: provider alias %q is not one RezusCloud writes", r.Type, r.Name, alias)
		}
		names[name] = true
	}
	return sortedKeys(names), nil
}

// ModulesInState returns the module calls (ModuleName) the state holds
// resources of, sorted by group then provider.
func ModulesInState(state []byte) ([]ModuleUse, error) {
	st, err := parseState(state)
	if err != nil {
		return nil, err
	}
	seen := map[ModuleUse]bool{}
	var out []ModuleUse
	for _, r := range st.Resources {
		if r.Module == "" || len(r.Instances) == 0 {
			continue
		}
		group, provider, ok := ParseModuleName(moduleRoot(r.Module))
		if !ok {
			return nil, fmt.Errorf("%s.%s.%s: module %q is not a call RezusCloud writes", r.Module, r.Type, r.Name, r.Module)
		}
		u := ModuleUse{Group: group, Provider: provider}
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].Provider < out[j].Provider
	})
	return out, nil
}

// moduleRoot is the first step of a state's module address:
// "module.a.module.b" -> "module.a".
func moduleRoot(addr string) string {
	rest, ok := strings.CutPrefix(addr, "module.")
	if !ok {
		return addr
	}
	name, _, _ := strings.Cut(rest, ".")
	// A module call with for_each/count has an index: module.a["x"].
	name, _, _ = strings.Cut(name, "[")
	return "module." + name
}

// providerAliasOf reads the alias of a state's provider address,
// provider["registry.opentofu.org/ns/type"].alias.
func providerAliasOf(addr string) (string, error) {
	rest, ok := strings.CutPrefix(addr, `provider["`)
	if !ok {
		return "", fmt.Errorf("provider address %q is not of the form provider[\"<source>\"].<alias>", addr)
	}
	_, after, ok := strings.Cut(rest, `"]`)
	if !ok {
		return "", fmt.Errorf("provider address %q is not of the form provider[\"<source>\"].<alias>", addr)
	}
	alias, ok := strings.CutPrefix(after, ".")
	if !ok || alias == "" {
		return "", fmt.Errorf("provider address %q has no alias", addr)
	}
	return alias, nil
}

// StateEndpoint returns the control-plane endpoint address the configuration
// made (the EndpointOutput output), and false when the state has none (the
// tenant declares spec.controlPlane.endpoint, or nothing was applied yet).
// On OCI it is a load balancer's, not the first control-plane machine's.
func StateEndpoint(state []byte) (string, bool, error) {
	st, err := parseState(state)
	if err != nil {
		return "", false, err
	}
	o, ok := st.Outputs[EndpointOutput]
	if !ok || len(o.Value) == 0 || string(o.Value) == "null" {
		return "", false, nil
	}
	var addr string
	if err := json.Unmarshal(o.Value, &addr); err != nil {
		return "", false, fmt.Errorf("output %s is %s, want a string", EndpointOutput, string(o.Value))
	}
	return addr, addr != "", nil
}

// MachineName is the name of machine idx (0-based) of a node group.
func MachineName(nodeGroup string, idx int) string {
	return nodeGroup + "-" + strconv.Itoa(idx)
}
