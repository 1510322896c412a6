package apply

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/providers"
)

func TestDecideTofu(t *testing.T) {
	last := &appliedRecord{Inputs: "in-1", StateRevision: 7, Machines: "ms-1", Apply: "apply-1", Generation: 3}
	same := tofuFacts{Last: last, Inputs: "in-1", StateRevision: 7, Machines: "ms-1"}
	with := func(f func(*tofuFacts)) tofuFacts {
		c := same
		f(&c)
		return c
	}
	tests := []struct {
		name  string
		facts tofuFacts
		run   bool
	}{
		{"nothing tofu acts on changed: no run", same, false},
		{"no record here (a first run, another replica ran before, a run died): run", with(func(f *tofuFacts) { f.Last = nil }), true},
		{"the configuration changed", with(func(f *tofuFacts) { f.Inputs = "in-2" }), true},
		{"the configuration could not be made", with(func(f *tofuFacts) { f.Inputs = "" }), true},
		{"the state was written since (a destroy, an import, another writer)", with(func(f *tofuFacts) { f.StateRevision = 8 }), true},
		{"the state is gone", with(func(f *tofuFacts) { f.StateRevision = 0 }), true},
		{"a Machine object differs from the state's machine", with(func(f *tofuFacts) { f.Machines = "ms-2" }), true},
		{"a replacement waits", with(func(f *tofuFacts) { f.Replacements = 1 }), true},
		{"the replacements are unknown", with(func(f *tofuFacts) { f.Replacements = -1 }), true},
		{"metal groups are built every run", with(func(f *tofuFacts) { f.Metal = true }), true},
		{"a drift correction always runs", with(func(f *tofuFacts) { f.Drift = true }), true},
		{"a drift correction without a record runs", tofuFacts{Drift: true}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run, reason := decideTofu(tc.facts)
			require.Equal(t, tc.run, run, reason)
			require.NotEmpty(t, reason)
		})
	}
}

// TestInputsDigest: each input tofu acts on changes the digest; each it
// does not act on leaves it alone.
func TestInputsDigest(t *testing.T) {
	mainOf := func(image, userData, size string, names ...string) string {
		each := map[string]any{}
		for _, n := range names {
			each[n] = "${var.user_data_w[\"" + n + "\"]}"
		}
		b, _ := json.Marshal(map[string]any{
			"terraform": map[string]any{"required_providers": map[string]any{"hcloud": map[string]any{"source": "hetznercloud/hcloud", "version": "1.52.0"}}},
			"resource": map[string]any{"hcloud_server": map[string]any{"w": map[string]any{
				"for_each": each, "image": image, "user_data": userData, "server_type": size,
				"lifecycle": map[string]any{"ignore_changes": []any{"user_data", "image"}},
			}}},
		})
		return string(b)
	}
	varsOf := func(configs map[string]string) string {
		b, _ := json.Marshal(map[string]any{"user_data_w": configs})
		return string(b)
	}
	base := providers.Files{
		Main:    []byte(mainOf("talos-v1.13.0", "${each.value}", "cx22", "w-0", "w-1")),
		Vars:    []byte(varsOf(map[string]string{"w-0": "config of v1.13.0", "w-1": "config of v1.13.0"})),
		Modules: map[string]map[string]string{"emu": {"main.tf": "resource \"x\" \"y\" {}"}},
	}
	backend, cli := []byte(`{"terraform":{"backend":{"http":{"address":"a"}}}}`), []byte(`provider_installation { filesystem_mirror { path = "/m" } }`)
	digest := func(f providers.Files, backend, cli []byte) string {
		d, err := inputsDigest(f, backend, cli)
		require.NoError(t, err)
		return d
	}
	want := digest(base, backend, cli)
	withFiles := func(mut func(*providers.Files)) providers.Files {
		f := providers.Files{Main: base.Main, Vars: base.Vars, Modules: map[string]map[string]string{"emu": {"main.tf": base.Modules["emu"]["main.tf"]}}}
		mut(&f)
		return f
	}
	same := []struct {
		name  string
		files providers.Files
	}{
		{"a version write-back: new machine configs", withFiles(func(f *providers.Files) {
			f.Vars = []byte(varsOf(map[string]string{"w-0": "config of v1.13.1", "w-1": "config of v1.13.1"}))
		})},
		{"a new image, which ignore_changes lists", withFiles(func(f *providers.Files) {
			f.Main = []byte(mainOf("talos-v1.13.1", "${each.value}", "cx22", "w-0", "w-1"))
		})},
		{"the same configuration with its keys in another order", withFiles(func(f *providers.Files) {
			var m map[string]any
			require.NoError(t, json.Unmarshal(base.Main, &m))
			b, _ := json.MarshalIndent(m, "", "   ")
			f.Main = b
		})},
	}
	for _, tc := range same {
		t.Run("same/"+tc.name, func(t *testing.T) { require.Equal(t, want, digest(tc.files, backend, cli)) })
	}
	differs := []struct {
		name         string
		files        providers.Files
		backend, cli []byte
	}{
		{"a machine more", withFiles(func(f *providers.Files) {
			f.Main = []byte(mainOf("talos-v1.13.0", "${each.value}", "cx22", "w-0", "w-1", "w-2"))
			f.Vars = []byte(varsOf(map[string]string{"w-0": "c", "w-1": "c", "w-2": "c"}))
		}), backend, cli},
		{"a machine in the variables only", withFiles(func(f *providers.Files) {
			f.Vars = []byte(varsOf(map[string]string{"w-0": "c", "w-1": "c", "w-2": "c"}))
		}), backend, cli},
		{"another server type", withFiles(func(f *providers.Files) {
			f.Main = []byte(mainOf("talos-v1.13.0", "${each.value}", "cx32", "w-0", "w-1"))
		}), backend, cli},
		{"a module file", withFiles(func(f *providers.Files) { f.Modules["emu"]["main.tf"] += "\n# changed" }), backend, cli},
		{"a module more", withFiles(func(f *providers.Files) { f.Modules["other"] = map[string]string{"main.tf": ""} }), backend, cli},
		{"a variable that is not a map of configs", withFiles(func(f *providers.Files) { f.Vars = []byte(`{"user_data_w":"one string"}`) }), backend, cli},
		{"another backend", base, []byte(`{"terraform":{"backend":{"http":{"address":"b"}}}}`), cli},
		{"another provider mirror", base, backend, []byte(`provider_installation { filesystem_mirror { path = "/n" } }`)},
	}
	for _, tc := range differs {
		t.Run("differs/"+tc.name, func(t *testing.T) { require.NotEqual(t, want, digest(tc.files, tc.backend, tc.cli)) })
	}
	_, err := inputsDigest(providers.Files{Main: []byte("not json")}, nil, nil)
	require.Error(t, err)
}

func TestMachinesDigest(t *testing.T) {
	a := machineKey{Name: "w-0", NodeGroup: "w", Address: "10.0.0.1", ProviderID: "emu://w-0", Hostname: "t-w-0"}
	b := machineKey{Name: "w-1", NodeGroup: "w", Address: "10.0.0.2", ProviderID: "emu://w-1", Hostname: "t-w-1"}
	require.Equal(t, machinesDigest([]machineKey{a, b}), machinesDigest([]machineKey{b, a}), "order does not count")
	moved := b
	moved.Address = "10.0.0.3"
	require.NotEqual(t, machinesDigest([]machineKey{a, b}), machinesDigest([]machineKey{a, moved}))
	require.NotEqual(t, machinesDigest([]machineKey{a, b}), machinesDigest([]machineKey{a}))
}
