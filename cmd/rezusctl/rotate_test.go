package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// rotationJSON is the Upgrade name in tenant acme rotating the Kubernetes
// CA, in stage of accept, swap, drop, with the given phase and machine steps.
func rotationJSON(name string, rv int, phase, stage, reason string, steps ...string) string {
	status := fmt.Sprintf(`{"phase":%q,"reason":%q,"rotation":{"stages":["accept","swap","drop"],"stage":%q},"machines":[%s]}`,
		phase, reason, stage, strings.Join(steps, ","))
	return fmt.Sprintf(`{"apiVersion":"rezuscloud.io/v1","kind":"Upgrade","metadata":{"name":%q,"tenant":"acme","resourceVersion":"%d"},`+
		`"spec":{"rotate":["kubernetes-ca"],"maxParallelism":1},"status":%s}`, name, rv, status)
}

// TestRotateCommandFollowsStageByStage: the flags become spec.rotate (and
// now, noDrain) of an Upgrade; --wait prints each stage, then its machines'
// steps as `upgrade --wait` does, each stage starting them from Pending
// again.
func TestRotateCommandFollowsStageByStage(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	upgradeWatch(t, f,
		sseFrame(2, "MODIFIED", rotationJSON("rot", 2, "Running", "accept", "", step("cp-1", "controlplane", "Upgrading", ""), step("w-1", "worker", "Pending", ""))),
		sseFrame(3, "MODIFIED", rotationJSON("rot", 3, "Running", "accept", "", step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Done", ""))),
		sseFrame(4, "MODIFIED", rotationJSON("rot", 4, "Running", "swap", "", step("cp-1", "controlplane", "Pending", ""), step("w-1", "worker", "Pending", ""))),
		sseFrame(5, "MODIFIED", rotationJSON("rot", 5, "Running", "swap", "", step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Verifying", ""))),
		sseFrame(6, "MODIFIED", rotationJSON("rot", 6, "Running", "drop", "", step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Done", ""))),
		sseFrame(7, "MODIFIED", rotationJSON("rot", 7, "Succeeded", "drop", "2 of 2 machines rotated kubernetes-ca", step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Done", ""))),
	)
	out := tc.ok("rotate", "acme", "--kubernetes-ca", "--name", "rot", "--now", "--no-drain", "--wait")
	require.Equal(t, `upgrade/rot created: rotating kubernetes-ca of tenant "acme"
Running: 2 machines, control planes first
stage accept (1/3)
cp-1  controlplane  accept  Upgrading
cp-1  controlplane  accept  Done (41s)
w-1   worker        accept  Done (41s)
stage swap (2/3)
cp-1  controlplane  swap  Done (41s)
w-1   worker        swap  Verifying
stage drop (3/3)
cp-1  controlplane  drop  Done (41s)
w-1   worker        drop  Done (41s)
Succeeded: 2 of 2 machines rotated kubernetes-ca
`, out)
	var sent domain.Object
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/tenants/acme/upgrades"), &sent))
	require.Equal(t, "Upgrade", sent.Kind)
	require.JSONEq(t, `{"rotate":["kubernetes-ca"],"maxParallelism":1,"noDrain":true,"now":true}`, string(sent.Spec))

	// A run that fails exits 1 with its reason.
	f.resetCalls()
	upgradeWatch(t, f, sseFrame(2, "MODIFIED", rotationJSON("rot2", 2, "Failed", "swap", "w-1 (Failed): the node refused its config",
		step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Failed", "the node refused its config"))))
	r := tc.run("rotate", "acme", "--kubernetes-ca", "--name", "rot2", "-w")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stdout, "stage swap (2/3)\n")
	require.Contains(t, r.stdout, "w-1   worker        swap  Failed: the node refused its config\n")
	require.Equal(t, "Failed: w-1 (Failed): the node refused its config\n", r.stderr)
}

// TestRotateCommandFlags: each flag is one secret of spec.rotate, in the
// flags' order; --all is sent as is; the refused secrets are sent too, and
// the server's 422 (here the domain's own checks) says why, on the field.
func TestRotateCommandFlags(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	var refused []domain.Cause
	f.handle("POST /api/v1/tenants/acme/upgrades", func(w http.ResponseWriter, r *http.Request) {
		var o domain.Object
		require.NoError(t, json.NewDecoder(r.Body).Decode(&o))
		if _, causes := domain.UpgradeKind.NormalizeSpec(o.Spec); len(causes) > 0 {
			refused = causes
			writeStatus(w, domain.NewInvalid("Upgrade", o.Metadata.Name, causes))
			return
		}
		o.Metadata.ResourceVersion = "1"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(o)
	})
	for _, tt := range []struct {
		flags []string
		spec  string
	}{
		{[]string{"--talos-ca", "--kubernetes-ca"}, `{"rotate":["kubernetes-ca","talos-ca"],"maxParallelism":1}`},
		{[]string{"--aggregator-ca", "--bootstrap-token"}, `{"rotate":["aggregator-ca","bootstrap-token"],"maxParallelism":1}`},
		{[]string{"--all", "--now"}, `{"rotate":["all"],"maxParallelism":1,"now":true}`},
	} {
		f.resetCalls()
		out := tc.ok(append([]string{"rotate", "acme"}, tt.flags...)...)
		require.Regexp(t, `^upgrade/rotate-[a-z-]+-[0-9a-f]{5} created: rotating `, out, "%v", tt.flags)
		var sent domain.Object
		require.NoError(t, json.Unmarshal(f.body("POST /api/v1/tenants/acme/upgrades"), &sent))
		require.JSONEq(t, tt.spec, string(sent.Spec), "%v", tt.flags)
	}

	for _, tt := range []struct {
		flag, field, says string
	}{
		{"--etcd-ca", "spec.rotate[1]", "etcd-ca cannot be rotated: Talos cannot rotate the etcd CA (siderolabs/talos#8808)"},
		{"--service-account-key", "spec.rotate[1]", "service-account-key cannot be rotated: Talos's config holds one service-account key"},
		{"--encryption-key", "spec.rotate[1]", "encryption-key cannot be rotated: Talos's config holds one secretbox key"},
	} {
		r := tc.run("rotate", "acme", "--kubernetes-ca", tt.flag)
		require.Equal(t, 1, r.code, tt.flag)
		require.Contains(t, r.stderr, tt.field+": "+tt.says, tt.flag)
		require.Len(t, refused, 1, tt.flag)
	}

	f.resetCalls()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"rotate", "acme"}, "give the secrets to rotate"},
		{[]string{"rotate", "--kubernetes-ca"}, "give the tenant"},
	} {
		r := tc.run(tt.args...)
		require.Equal(t, 1, r.code, "%v", tt.args)
		require.Contains(t, r.stderr, tt.want, "%v", tt.args)
	}
	require.Empty(t, f.callLog(), "refused before any call")
}
