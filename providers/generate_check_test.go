package providers

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckGenerated breaks a good configuration in the ways a generator bug
// would and expects checkGenerated to say so.
func TestCheckGenerated(t *testing.T) {
	good := mustGenerate(t, generateCases()["openstack_placeholder"])
	require.NoError(t, checkGenerated(good.Main, good.Vars))

	mutate := func(t *testing.T, f func(d map[string]any)) []byte {
		var d map[string]any
		require.NoError(t, json.Unmarshal(good.Main, &d))
		f(d)
		b, err := json.Marshal(d)
		require.NoError(t, err)
		return b
	}
	get := func(d map[string]any, path ...string) map[string]any {
		cur := d
		for _, p := range path {
			cur = cur[p].(map[string]any)
		}
		return cur
	}
	instance := func(d map[string]any) map[string]any {
		return get(d, "resource", "openstack_compute_instance_v2", "ng_cp")
	}

	for _, tc := range []struct {
		name string
		main func(t *testing.T) []byte
		vars string
		want string
	}{
		{"not JSON", func(*testing.T) []byte { return []byte(`{"resource": `) }, "", "main.tf.json"},
		{"an unknown root block", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { d["locals"] = map[string]any{"x": 1} })
		}, "", `No argument or block type is named "locals"`},
		{"a resource without a provider", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { delete(instance(d), "provider") })
		}, "", `resource openstack_compute_instance_v2.ng_cp: main.tf.json:1,`},
		{"a provider alias not configured", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { instance(d)["provider"] = "openstack.p_other" })
		}, "", "provider openstack.p_other is not configured"},
		{"a resource of another provider's type", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) {
				get(d, "resource")["emulated_machine"] = map[string]any{"x": map[string]any{"provider": "openstack.p_os"}}
			})
		}, "", "type emulated_machine does not belong to provider openstack.p_os"},
		{"a provider not required", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { delete(get(d, "terraform", "required_providers"), "openstack") })
		}, "", `provider "openstack" is not in required_providers`},
		{"a provider configured twice", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) {
				p := get(d, "provider")
				p["openstack"] = append(p["openstack"].([]any), p["openstack"].([]any)[0])
			})
		}, "", "provider openstack.p_os configured twice"},
		{"a variable that is not sensitive", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { get(d, "variable", "user_data_cp")["sensitive"] = false })
		}, "", "must be sensitive"},
		{"an undeclared variable", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { instance(d)["user_data"] = "${var.user_data_cpp[each.key]}" })
		}, "", `undeclared variable "user_data_cpp"`},
		{"an undeclared resource", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) {
				instance(d)["network"] = map[string]any{"port": "${openstack_networking_port_v2.ng_cpp[each.key].id}"}
			})
		}, "", "undeclared resource openstack_networking_port_v2.ng_cpp"},
		{"an undeclared data source", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) {
				get(d, "resource", "openstack_networking_port_v2", "ng_cp")["network_id"] = "${data.openstack_networking_network_v2.nope.id}"
			})
		}, "", "undeclared data source data.openstack_networking_network_v2.nope"},
		{"each outside for_each", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { delete(instance(d), "for_each") })
		}, "", "each.value outside a for_each"},
		{"an unknown function", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { instance(d)["name"] = `${file("/etc/passwd")}` })
		}, "", "unknown function file"},
		{"a template syntax error", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { instance(d)["name"] = "${each.value.name" })
		}, "", `"${each.value.name"`},
		{"an output without a value", func(t *testing.T) []byte {
			return mutate(t, func(d map[string]any) { delete(get(d, "output", EndpointOutput), "value") })
		}, "", "an output without a value"},
		{"a variable without a value", func(*testing.T) []byte { return good.Main }, `{"user_data_cp":{"cp-0":"x"}}`, `no value for variable "user_data_workers"`},
		{"a value for an undeclared variable", func(*testing.T) []byte { return good.Main },
			`{"user_data_cp":{},"user_data_workers":{},"extra":{}}`, `a value for undeclared variable "extra"`},
		{"a value of the wrong type", func(*testing.T) []byte { return good.Main },
			`{"user_data_cp":"x","user_data_workers":{}}`, "variable user_data_cp: want an object of strings, got string"},
		{"a config that is not a string", func(*testing.T) []byte { return good.Main },
			`{"user_data_cp":{"cp-0":1},"user_data_workers":{}}`, `variable user_data_cp["cp-0"]: want a string, got number`},
		{"vars not JSON", func(*testing.T) []byte { return good.Main }, `{`, "rezus.auto.tfvars.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := good.Vars
			if tc.vars != "" {
				vars = []byte(tc.vars)
			}
			err := checkGenerated(tc.main(t), vars)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
