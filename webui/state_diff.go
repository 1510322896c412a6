package webui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// stateResources is what a state page can read of one state version's
// resources: nothing when the blob is encrypted (OpenTofu's TF_ENCRYPTION;
// the API serves the encrypted blob as it is stored and decrypts nothing),
// else each resource instance's address and its attributes, kept only as
// canonical JSON to compare: no attribute value ever reaches a page.
type stateResources struct {
	// Encrypted says the blob is encrypted: Instances is empty.
	Encrypted bool
	// Plain says the blob is stored unencrypted and the caller may not read
	// it (it holds the tenant's keys): Instances is empty.
	Plain bool
	// Instances maps an instance address ("module.m.aws_instance.web[\"a\"]",
	// a deposed one suffixed " (deposed XXXX)") to its attributes.
	Instances map[string]map[string]json.RawMessage
}

// tfStateV4 is the part of tofu's state format 4 the diff reads.
type tfStateV4 struct {
	EncryptedData json.RawMessage `json:"encrypted_data"`
	Resources     []struct {
		Module    string `json:"module"`
		Mode      string `json:"mode"`
		Type      string `json:"type"`
		Name      string `json:"name"`
		Instances []struct {
			IndexKey   json.RawMessage            `json:"index_key"`
			Deposed    string                     `json:"deposed"`
			Attributes map[string]json.RawMessage `json:"attributes"`
		} `json:"instances"`
	} `json:"resources"`
}

// readStateResources reads a state blob's resource instances.
func readStateResources(blob []byte) (stateResources, error) {
	var st tfStateV4
	if err := json.Unmarshal(blob, &st); err != nil {
		return stateResources{}, fmt.Errorf("the state is not JSON: %w", err)
	}
	if len(st.EncryptedData) > 0 {
		return stateResources{Encrypted: true}, nil
	}
	out := stateResources{Instances: map[string]map[string]json.RawMessage{}}
	for _, r := range st.Resources {
		addr := r.Type + "." + r.Name
		if r.Mode == "data" {
			addr = "data." + addr
		}
		if r.Module != "" {
			addr = r.Module + "." + addr
		}
		for _, in := range r.Instances {
			a := addr
			if k := bytes.TrimSpace(in.IndexKey); len(k) > 0 && string(k) != "null" {
				a += "[" + string(k) + "]"
			}
			if in.Deposed != "" {
				a += " (deposed " + in.Deposed + ")"
			}
			out.Instances[a] = in.Attributes
		}
	}
	return out, nil
}

// stateChange is one resource instance that differs between two versions.
type stateChange struct {
	Address string
	// Attributes are the names of the top-level attributes whose values
	// differ (added, removed or changed); never their values, which may be
	// secrets whether or not the provider marks them sensitive.
	Attributes []string
}

// stateDiff is how a newer state version's resources differ from an older one's.
type stateDiff struct {
	Added, Removed []string
	Changed        []stateChange
}

// Empty reports whether the versions hold the same resources alike.
func (d stateDiff) Empty() bool { return len(d.Added)+len(d.Removed)+len(d.Changed) == 0 }

// diffStateResources compares two versions' resource instances by address.
func diffStateResources(from, to stateResources) stateDiff {
	var d stateDiff
	for a, attrs := range to.Instances {
		old, ok := from.Instances[a]
		if !ok {
			d.Added = append(d.Added, a)
			continue
		}
		if names := changedAttributes(old, attrs); len(names) > 0 {
			d.Changed = append(d.Changed, stateChange{Address: a, Attributes: names})
		}
	}
	for a := range from.Instances {
		if _, ok := to.Instances[a]; !ok {
			d.Removed = append(d.Removed, a)
		}
	}
	sort.Strings(d.Added)
	sort.Strings(d.Removed)
	sort.Slice(d.Changed, func(i, j int) bool { return d.Changed[i].Address < d.Changed[j].Address })
	return d
}

// changedAttributes names the attributes whose JSON values differ.
func changedAttributes(a, b map[string]json.RawMessage) []string {
	var out []string
	for k, v := range b {
		if w, ok := a[k]; !ok || !sameJSON(v, w) {
			out = append(out, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// sameJSON compares two JSON values as values (key order and spacing aside).
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return bytes.Equal(ca, cb)
}

// joinNames lists attribute names for a table cell.
func joinNames(names []string) string { return strings.Join(names, ", ") }
