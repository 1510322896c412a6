package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// upgradeJSON is an Upgrade named to-113 in tenant acme with the given status.
func upgradeJSON(rv int, status string) string {
	return fmt.Sprintf(`{"apiVersion":"rezuscloud.io/v1","kind":"Upgrade","metadata":{"name":"to-113","tenant":"acme","resourceVersion":"%d"},`+
		`"spec":{"talosVersion":"v1.13.0","maxParallelism":1},"status":%s}`, rv, status)
}

func upgradeStatus(phase, reason string, steps ...string) string {
	return fmt.Sprintf(`{"phase":%q,"reason":%q,"machines":[%s]}`, phase, reason, strings.Join(steps, ","))
}

func step(name, role, phase, errText string) string {
	extra := ""
	if phase == domain.StepDone {
		extra = `,"started":"2026-05-01T12:00:00Z","finished":"2026-05-01T12:00:41Z"`
	}
	if errText != "" {
		extra += fmt.Sprintf(`,"error":%q`, errText)
	}
	return fmt.Sprintf(`{"name":%q,"role":%q,"from":"v1.12.0","to":"v1.13.0","phase":%q%s}`, name, role, phase, extra)
}

// upgradeWatch serves the watch of acme's upgrades: the frames, then waits.
func upgradeWatch(t *testing.T, f *fakeAPI, frames ...string) {
	f.handle("GET /api/v1/tenants/acme/upgrades", func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "true", r.URL.Query().Get("watch"))
		w.Header().Set("Content-Type", "text/event-stream")
		for _, fr := range frames {
			fmt.Fprint(w, fr)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
}

func TestUpgradeCommandFollowsMachineByMachine(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	upgradeWatch(t, f,
		sseFrame(2, "MODIFIED", upgradeJSON(2, upgradeStatus("Running", "", step("cp-1", "controlplane", "Pending", ""), step("w-1", "worker", "Pending", "")))),
		sseFrame(3, "ADDED", `{"kind":"Upgrade","metadata":{"name":"other"}}`),
		sseFrame(4, "MODIFIED", upgradeJSON(4, upgradeStatus("Running", "", step("cp-1", "controlplane", "Upgrading", ""), step("w-1", "worker", "Pending", "")))),
		sseFrame(5, "MODIFIED", upgradeJSON(5, upgradeStatus("Running", "", step("cp-1", "controlplane", "Rebooting", ""), step("w-1", "worker", "Pending", "")))),
		sseFrame(6, "MODIFIED", upgradeJSON(6, upgradeStatus("Running", "", step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Upgrading", "")))),
		sseFrame(7, "MODIFIED", upgradeJSON(7, upgradeStatus("Running", "", step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Done", "")))),
		sseFrame(8, "MODIFIED", upgradeJSON(8, upgradeStatus("Succeeded", "2 of 2 machines on v1.13.0", step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Done", "")))),
	)
	out := tc.ok("upgrade", "acme", "--talos-version", "v1.13.0", "--name", "to-113", "--node-group", "cp", "--node-group", "workers", "--wait")
	require.Equal(t, `upgrade/to-113 created: tenant "acme" to v1.13.0
Running: 2 machines, control planes first
cp-1  controlplane  v1.12.0 -> v1.13.0  Upgrading
cp-1  controlplane  v1.12.0 -> v1.13.0  Rebooting
cp-1  controlplane  v1.12.0 -> v1.13.0  Done (41s)
w-1   worker        v1.12.0 -> v1.13.0  Upgrading
w-1   worker        v1.12.0 -> v1.13.0  Done (41s)
Succeeded: 2 of 2 machines on v1.13.0
`, out)
	var sent domain.Object
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/tenants/acme/upgrades"), &sent))
	require.Equal(t, "Upgrade", sent.Kind)
	require.JSONEq(t, `{"talosVersion":"v1.13.0","nodeGroups":["cp","workers"],"maxParallelism":1}`, string(sent.Spec))
	require.Equal(t, []string{"resourceVersion=1&watch=true"}, f.queriesOf("GET /api/v1/tenants/acme/upgrades"), "the watch starts at the created version")
}

func TestUpgradeCommandFailedRun(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	upgradeWatch(t, f,
		sseFrame(2, "MODIFIED", upgradeJSON(2, upgradeStatus("Failed", "w-1 (RolledBack): the node refused the upgrade; 1 of 2 machines on v1.13.0",
			step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "RolledBack", "the node refused the upgrade; it still runs v1.12.0")))))
	r := tc.run("upgrade", "acme", "--talos-version", "v1.13.0", "--name", "to-113", "-w")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stdout, "w-1   worker        v1.12.0 -> v1.13.0  RolledBack: the node refused the upgrade; it still runs v1.12.0\n")
	require.Equal(t, "Failed: w-1 (RolledBack): the node refused the upgrade; 1 of 2 machines on v1.13.0\n", r.stderr)
}

func TestUpgradeCommandWithoutWaitAndFollow(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	out := tc.ok("upgrade", "acme", "--talos-version", "1.13.0")
	require.Regexp(t, `^upgrade/talos-1-13-0-[0-9a-f]{5} created: tenant "acme" to 1.13.0\n$`, out)
	for _, c := range f.callLog() {
		require.NotContains(t, c, "GET /api/v1/tenants/acme/upgrades", "no watch without --wait")
	}

	// --follow reads the upgrade and follows it; one that has ended prints how.
	f.put("/api/v1/tenants/acme/upgrades/to-113", &domain.Object{APIVersion: domain.APIVersion, Kind: "Upgrade",
		Metadata: domain.ObjectMeta{Name: "to-113", Tenant: "acme"}, Spec: json.RawMessage(`{"talosVersion":"v1.13.0"}`),
		Status: json.RawMessage(upgradeStatus("Succeeded", "1 of 1 machines on v1.13.0", step("cp-1", "controlplane", "Done", "")))})
	out = tc.ok("upgrade", "acme", "--follow", "to-113")
	require.Equal(t, "cp-1  controlplane  v1.12.0 -> v1.13.0  Done (41s)\nSucceeded: 1 of 1 machines on v1.13.0\n", out)

	for _, args := range [][]string{{"upgrade", "acme"}, {"upgrade", "--talos-version", "v1.13.0"}, {"upgrade", "acme", "--follow", "x", "--talos-version", "v1.13.0"}} {
		r := tc.run(args...)
		require.Equal(t, 1, r.code, "%v", args)
	}
}

func TestUpgradeColumns(t *testing.T) {
	var b strings.Builder
	o := &domain.Object{APIVersion: domain.APIVersion, Kind: "Upgrade", Metadata: domain.ObjectMeta{Name: "to-113", Tenant: "acme", CreationTimestamp: &tcNow},
		Spec:   json.RawMessage(`{"talosVersion":"v1.13.0"}`),
		Status: json.RawMessage(upgradeStatus("Running", "", step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Rebooting", "")))}
	o.Status = json.RawMessage(strings.Replace(string(o.Status), `"reason":""`, `"reason":"","current":"w-1"`, 1))
	k, err := resolveKind("upgrades")
	require.NoError(t, err)
	p := newPrinter(&b, outTable, k, false, func() time.Time { return tcNow.Add(5 * time.Minute) })
	raw, err := json.Marshal(o)
	require.NoError(t, err)
	it, err := newItem(raw)
	require.NoError(t, err)
	require.NoError(t, p.printList([]item{it}, "1"))
	require.Equal(t, "NAME     TALOS     KUBERNETES   PHASE     DONE   CURRENT   AGE\nto-113   v1.13.0   <none>       Running   1/2    w-1       5m\n", b.String())
}

func TestUpgradeCommandKubernetes(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	k8sStep := func(name, role, phase string) string {
		return strings.NewReplacer("v1.12.0", "v1.35.2", "v1.13.0", "v1.36.1").Replace(step(name, role, phase, ""))
	}
	upgradeWatch(t, f,
		sseFrame(2, "MODIFIED", upgradeJSON(2, upgradeStatus("Running", "", k8sStep("cp-1", "controlplane", "Upgrading"), k8sStep("w-1", "worker", "Pending")))),
		sseFrame(3, "MODIFIED", upgradeJSON(3, upgradeStatus("Running", "", k8sStep("cp-1", "controlplane", "Done"), k8sStep("w-1", "worker", "Done")))),
		sseFrame(4, "MODIFIED", upgradeJSON(4, upgradeStatus("Succeeded", "2 of 2 machines on Kubernetes v1.36.1", k8sStep("cp-1", "controlplane", "Done"), k8sStep("w-1", "worker", "Done")))),
	)
	out := tc.ok("upgrade", "acme", "--kubernetes-version", "v1.36.1", "--name", "to-113", "--wait")
	require.Equal(t, `upgrade/to-113 created: tenant "acme" to Kubernetes v1.36.1
Running: 2 machines, control planes first
cp-1  controlplane  v1.35.2 -> v1.36.1  Upgrading
cp-1  controlplane  v1.35.2 -> v1.36.1  Done (41s)
w-1   worker        v1.35.2 -> v1.36.1  Done (41s)
Succeeded: 2 of 2 machines on Kubernetes v1.36.1
`, out)
	var sent domain.Object
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/tenants/acme/upgrades"), &sent))
	require.JSONEq(t, `{"kubernetesVersion":"v1.36.1","maxParallelism":1}`, string(sent.Spec), "an Upgrade of Kubernetes alone")

	f.resetCalls()
	out = tc.ok("upgrade", "acme", "--kubernetes-version", "1.36.1")
	require.Regexp(t, `^upgrade/kubernetes-1-36-1-[0-9a-f]{5} created: tenant "acme" to Kubernetes 1.36.1\n$`, out)
	require.Equal(t, []string{"POST /api/v1/tenants/acme/upgrades"}, f.callLog(), "no watch without --wait")

	// The version rules are the server's: its 422 comes back with the field.
	f.handle("POST /api/v1/tenants/acme/upgrades", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, domain.NewInvalid("Upgrade", "to-138", []domain.Cause{{Field: "spec.kubernetesVersion", Type: domain.CauseInvalid,
			Message: "v1.38.0 skips a minor version: the cluster runs v1.36.1; upgrade to v1.37.x first"}}))
	})
	r := tc.run("upgrade", "acme", "--kubernetes-version", "v1.38.0", "--name", "to-138")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "spec.kubernetesVersion")
	require.Contains(t, r.stderr, "skips a minor version")

	f.resetCalls()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"upgrade", "acme", "--talos-version", "v1.13.0", "--kubernetes-version", "v1.36.1"}, "not both"},
		{[]string{"upgrade", "acme"}, "--talos-version vX.Y.Z or --kubernetes-version vX.Y.Z"},
		{[]string{"upgrade", "acme", "--follow", "x", "--kubernetes-version", "v1.36.1"}, "does not go with"},
	} {
		r := tc.run(tt.args...)
		require.Equal(t, 1, r.code, "%v", tt.args)
		require.Contains(t, r.stderr, tt.want, "%v", tt.args)
	}
	require.Empty(t, f.callLog(), "refused before any call")
}
