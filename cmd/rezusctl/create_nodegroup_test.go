package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestCreateNodeGroupWithExtensions(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	r := tc.run("create", "nodegroup", "storage", "-t", "acme", "--count", "3", "--provider", "emulated",
		"--extension", "siderolabs/iscsi-tools", "--extension", "siderolabs/util-linux-tools", "--kernel-arg", "console=ttyS0")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "nodegroup/storage created\n", r.stdout)
	assert.Equal(t, []string{"POST /api/v1/tenants/acme/nodegroups"}, f.callLog())
	var ng domain.NodeGroup
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/tenants/acme/nodegroups"), &ng))
	assert.Equal(t, "storage", ng.Metadata.Name)
	assert.Equal(t, domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 3, Provider: "emulated",
		Schematic: &domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}, ExtraKernelArgs: []string{"console=ttyS0"}}}, ng.Spec)

	r = tc.run("create", "nodegroup", "plain", "-t", "acme", "--provider", "emulated", "--dry-run")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "schematic", "no flags: the tenant's schematic")
	r = tc.run("create", "nodegroup", "x", "-t", "acme")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "--provider")
}
