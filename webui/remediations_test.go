package webui

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestRemediationsPanel: the tenant page lists the machines replaced for
// being unhealthy, with each step, the apply that replaced it and what a
// Joining one waits for, live.
func TestRemediationsPanel(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	viewer := s.signIn("vi", domain.RoleView)
	page := viewer.get("/ui/test/ops/acme")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.Contains(t, page.Body, `sse-swap="remediations"`)
	require.Contains(t, page.Body, "No machine has been replaced")

	now := time.Now().UTC()
	s.record(domain.RemediationKind, "acme", "workers-1-6b12", domain.RemediationSpec{NodeGroup: "workers", Machine: "workers-1",
		Role: domain.RoleWorker, Reason: "Unreachable: connection refused", UnhealthySince: now.Add(-time.Minute)},
		domain.RemediationStatus{Phase: domain.RemediationJoining, Apply: "apply-7", Steps: []domain.RemediationStep{
			{Name: "Detected", Time: now}, {Name: "Drained", Time: now}, {Name: "Replaced", Time: now}},
			Wait:    &domain.StepWait{For: "the new workers-1 to be healthy", Since: now, Deadline: now.Add(10 * time.Minute), LastError: "NodeNotReady"},
			Replica: "host-b-7"})
	page = viewer.get("/ui/test/ops/acme")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	for _, want := range []string{`data-remediation="workers-1-6b12"`, "workers / workers-1", "Joining",
		"Unreachable: connection refused", "Detected", "Drained", "Replaced", `/ui/tenants/acme/applies/apply-7`,
		`data-testid="step-wait"`, "waiting for the new workers-1 to be healthy: NodeNotReady",
		`data-testid="remediation-replica">on host-b-7</div>`} {
		require.Contains(t, page.Body, want)
	}
	require.NotContains(t, page.Body, "data-mutating")
}
