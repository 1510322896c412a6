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
	tc.ok("upgrade", "acme", "--kubernetes-version", "v1.36.1", "--name", "short", "--verify-deadline", "2m", "--reboot-deadline", "30m")
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/tenants/acme/upgrades"), &sent))
	require.JSONEq(t, `{"kubernetesVersion":"v1.36.1","maxParallelism":1,"deadlines":{"verify":"2m","reboot":"30m"}}`, string(sent.Spec), "deadlines set on the Upgrade")

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

// waitingStep is a machine step of cp-1 that waits since 11:55:50, with a
// deadline at 12:05:50 (the test CLI's clock says 12:00:00), the last
// answer lastErr checked at checked.
func waitingStep(phase, lastErr, checked string) string {
	return fmt.Sprintf(`{"name":"cp-1","role":"controlplane","from":"v1.35.4","to":"v1.35.5","phase":%q,`+
		`"message":"waiting for kube-apiserver on cp-1 to answer v1.35.5: %s",`+
		`"wait":{"for":"kube-apiserver on cp-1 to answer v1.35.5","since":"2026-05-01T11:55:50Z","deadline":"2026-05-01T12:05:50Z",`+
		`"lastError":%q,"checked":%q}}`, phase, lastErr, lastErr, checked)
}

// A step that waits shows what it waits for, since when and until when, as
// of the reader's clock; a check with the same answer prints nothing, a new
// answer a new line, and a run that fails at the deadline says why.
func TestUpgradeCommandShowsTheWait(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	upgradeWatch(t, f,
		sseFrame(2, "MODIFIED", upgradeJSON(2, upgradeStatus("Running", "", waitingStep("Verifying", "connection refused", "2026-05-01T11:59:00Z")))),
		sseFrame(3, "MODIFIED", upgradeJSON(3, upgradeStatus("Running", "", waitingStep("Verifying", "connection refused", "2026-05-01T11:59:30Z")))),
		sseFrame(4, "MODIFIED", upgradeJSON(4, upgradeStatus("Running", "", waitingStep("Verifying", "503 Service Unavailable", "2026-05-01T11:59:45Z")))),
		sseFrame(5, "MODIFIED", upgradeJSON(5, upgradeStatus("Failed",
			"cp-1 (RolledBack): Verifying passed its deadline of 10m waiting for kube-apiserver on cp-1 to answer v1.35.5; last answer: 503 Service Unavailable",
			`{"name":"cp-1","role":"controlplane","from":"v1.35.4","to":"v1.35.5","phase":"RolledBack","error":"Verifying passed its deadline of 10m waiting for kube-apiserver on cp-1 to answer v1.35.5; last answer: 503 Service Unavailable; rolled back to v1.35.4"}`))),
	)
	r := tc.run("upgrade", "acme", "--kubernetes-version", "v1.35.5", "--name", "to-113", "--wait")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, `upgrade/to-113 created: tenant "acme" to Kubernetes v1.35.5
Running: 1 machines, control planes first
cp-1  controlplane  v1.35.4 -> v1.35.5  Verifying: waiting for kube-apiserver on cp-1 to answer v1.35.5: connection refused, 4m10s (fails in 5m50s)
cp-1  controlplane  v1.35.4 -> v1.35.5  Verifying: waiting for kube-apiserver on cp-1 to answer v1.35.5: 503 Service Unavailable, 4m10s (fails in 5m50s)
cp-1  controlplane  v1.35.4 -> v1.35.5  RolledBack: Verifying passed its deadline of 10m waiting for kube-apiserver on cp-1 to answer v1.35.5; last answer: 503 Service Unavailable; rolled back to v1.35.4
`, r.stdout)
	require.Equal(t, "Failed: cp-1 (RolledBack): Verifying passed its deadline of 10m waiting for kube-apiserver on cp-1 to answer v1.35.5; last answer: 503 Service Unavailable\n", r.stderr)
}

// Between events the line of a waiting step is repeated with its time
// moved on: every 10 s at a terminal, every 30 s into a log; a step that
// stops waiting is not repeated.
func TestUpgradeProgressRepeatsWaits(t *testing.T) {
	waiting := func(rv int) *domain.Object {
		o := &domain.Object{}
		require.NoError(t, json.Unmarshal([]byte(upgradeJSON(rv, upgradeStatus("Running", "",
			waitingStep("Verifying", "connection refused", "2026-05-01T11:59:00Z"), step("w-1", "worker", "Pending", "")))), o))
		return o
	}
	line := func(elapsed, left string) string {
		return "cp-1  controlplane  v1.35.4 -> v1.35.5  Verifying: waiting for kube-apiserver on cp-1 to answer v1.35.5: connection refused, " +
			elapsed + " (fails in " + left + ")\n"
	}
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		terminal bool
		after    []time.Duration // since start, a refresh each
		want     []string        // the lines the refreshes print
	}{
		{"terminal", true, []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second, 20 * time.Second},
			[]string{line("4m20s", "5m40s"), line("4m30s", "5m30s")}},
		{"log", false, []time.Duration{10 * time.Second, 29 * time.Second, 30 * time.Second, 45 * time.Second, 60 * time.Second},
			[]string{line("4m40s", "5m20s"), line("5m10s", "4m50s")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut strings.Builder
			now := start
			p := newUpgradeProgress(&out, &errOut, func() time.Time { return now }, tt.terminal)
			done, err := p.show(waiting(2))
			require.NoError(t, err)
			require.False(t, done)
			require.Equal(t, "Running: 2 machines, control planes first\n"+line("4m10s", "5m50s"), out.String())

			out.Reset()
			for _, d := range tt.after {
				now = start.Add(d)
				p.refresh()
			}
			require.Equal(t, strings.Join(tt.want, ""), out.String())

			// The same wait again (a check with the same answer) prints
			// nothing; once the step moves on, nothing is repeated.
			out.Reset()
			_, err = p.show(waiting(3))
			require.NoError(t, err)
			require.Empty(t, out.String())
			o := &domain.Object{}
			require.NoError(t, json.Unmarshal([]byte(upgradeJSON(4, upgradeStatus("Running", "", step("cp-1", "controlplane", "Done", ""), step("w-1", "worker", "Pending", "")))), o))
			_, err = p.show(o)
			require.NoError(t, err)
			now = now.Add(time.Hour)
			p.refresh()
			require.Equal(t, "cp-1  controlplane  v1.12.0 -> v1.13.0  Done (41s)\n", out.String())
		})
	}
}

// Following a run that waits ends when the command's context does (^C),
// with the ticker that repeats its line.
func TestUpgradeFollowEndsWithItsContext(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	f.put("/api/v1/tenants/acme/upgrades/to-113", &domain.Object{APIVersion: domain.APIVersion, Kind: "Upgrade",
		Metadata: domain.ObjectMeta{Name: "to-113", Tenant: "acme"}, Spec: json.RawMessage(`{"kubernetesVersion":"v1.35.5"}`),
		Status: json.RawMessage(upgradeStatus("Running", "", waitingStep("Verifying", "connection refused", "2026-05-01T11:59:00Z")))})
	upgradeWatch(t, f)
	out, _, stop := tc.start("upgrade", "acme", "--follow", "to-113")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "connection refused, 4m10s (fails in 5m50s)") }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 130, stop(), "interrupted")
}
