package providers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReplaceAddresses reads recorded states of real tofu runs: the
// module-built emulated machines and the OpenStack generator's.
func TestReplaceAddresses(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(t, err)
		return b
	}
	module := read("state_emulated_module.json")
	got, err := ReplaceAddresses(module, "workers", "workers-1")
	require.NoError(t, err)
	require.Equal(t, []string{`module.ng_workers__emulated.emulated_machine.machine["workers-1"]`}, got)

	got, err = ReplaceAddresses(module, "cp", "cp-0")
	require.NoError(t, err)
	require.Equal(t, []string{`module.ng_cp__emulated.emulated_machine.machine["cp-0"]`}, got, "the endpoint address stays")

	_, err = ReplaceAddresses(module, "workers", "workers-7")
	require.ErrorIs(t, err, ErrMachineNotInState)
	require.ErrorContains(t, err, "no resource of machine workers-7")
	serial, err := StateSerial(module)
	require.NoError(t, err)
	require.Positive(t, serial)
	_, err = ReplaceAddresses(module, "cp", "workers-1")
	require.Error(t, err, "a machine of another group")

	os := read("state_openstack.json")
	machines, err := ProjectState(os)
	require.NoError(t, err)
	require.NotEmpty(t, machines)
	m := machines[len(machines)-1]
	got, err = ReplaceAddresses(os, m.NodeGroup, m.Name)
	require.NoError(t, err)
	require.Len(t, got, 2, "the instance and its port: %v", got)
	for _, a := range got {
		require.Contains(t, a, `["`+m.Name+`"]`)
	}
}
