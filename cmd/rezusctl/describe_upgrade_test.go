package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// describe upgrade shows each machine's step and the replica that ran it; a
// waiting one its wait as of the reader's clock, since when and its
// deadline, absolute and relative.
func TestDescribeUpgrade(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/tenants/acme/upgrades/to-1355", obj("Upgrade", "acme", "to-1355", tcNow, `{"kubernetesVersion":"v1.35.5","maxParallelism":1}`,
		upgradeStatus("Running", "", step("cp-0", "controlplane", "Done", ""), withReplica(waitingStep("Verifying", "connection refused", "2026-05-01T11:59:55Z"), "host-b-7"),
			step("w-1", "worker", "Pending", "")), nil))
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	out := tc.ok("describe", "upgrade", "to-1355")
	golden(t, "describe.upgrade", out)
	require.Contains(t, out, "  cp-1   controlplane   v1.35.4   v1.35.5   Verifying   host-b-7   waiting for kube-apiserver on cp-1 to answer v1.35.5: connection refused, 4m10s (fails in 5m50s)\n")
	require.Contains(t, out, "    Since:       2026-05-01T11:55:50Z (4m10s ago)\n")
	require.Contains(t, out, "    Deadline:    2026-05-01T12:05:50Z (in 5m50s)\n")

	// Past its deadline (the saga has not failed the step yet) it says so.
	tc.now = tc.now.Add(time.Hour)
	out = tc.ok("describe", "upgrade", "to-1355")
	require.Contains(t, out, "connection refused, 1h4m10s (past its deadline)")
	require.Contains(t, out, "    Deadline:    2026-05-01T12:05:50Z (54m10s ago)\n")
}

// withReplica names the replica that ran a step of upgradeStatus.
func withReplica(step, replica string) string {
	return strings.TrimSuffix(step, "}") + `,"replica":"` + replica + `"}`
}
