package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// recordRemediation writes a Remediation as the remediation controller does
// (straight through the store), with phase.
func (s *stack) recordRemediation(name, phase string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ref := domain.ObjectRef(domain.RemediationKind, "acme", name)
	spec, _ := json.Marshal(domain.RemediationSpec{NodeGroup: "workers", Machine: "workers-0", Role: domain.RoleWorker, Reason: "Unreachable"})
	_, err := s.env.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: "system:remediation", Now: time.Now(), NewUID: "uid-" + name,
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: "acme"}, Spec: spec}}, eventstore.UpdateOptions{})
	require.NoError(s.t, err)
	status, _ := json.Marshal(domain.RemediationStatus{Phase: phase})
	res, err := s.env.Store.Execute(ctx, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Actor: "system:remediation", Now: time.Now(),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: "acme"}, Status: status}}, eventstore.UpdateOptions{})
	require.NoError(s.t, err)
	require.NoError(s.t, s.cache.WaitFor(ctx, res.Seq))
}

// TestRemediationsAreTheControllers: remediations are read through the API
// and written by the controllers: a create, update or patch is a 405 with
// the way to ask for remediation; a finished one may be deleted (its
// history), one in progress may not (409, the machine is being replaced).
func TestRemediationsAreTheControllers(t *testing.T) {
	s := newStack(t).withProvider()
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.recordRemediation("workers-0-a", domain.RemediationReplacing)
	s.recordRemediation("workers-0-b", domain.RemediationSucceeded)

	r := s.do(http.MethodGet, "/api/v1/tenants/acme/remediations", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), "workers-0-a")
	rv := s.do(http.MethodGet, "/api/v1/tenants/acme/remediations/workers-0-b", nil).object(t).Metadata.ResourceVersion

	for _, tc := range []struct {
		method, path, body string
		headers            []string
	}{
		{http.MethodPost, "/api/v1/tenants/acme/remediations", `{"metadata":{"name":"mine"},"spec":{"nodeGroup":"workers","machine":"workers-1","role":"worker"}}`, nil},
		{http.MethodPut, "/api/v1/tenants/acme/remediations/workers-0-b", `{"metadata":{"name":"workers-0-b","resourceVersion":"` + rv + `"},"spec":{"nodeGroup":"workers","machine":"workers-1","role":"worker"}}`, nil},
		{http.MethodPatch, "/api/v1/tenants/acme/remediations/workers-0-b", `{"spec":{"machine":"workers-1"}}`, []string{"Content-Type", "application/merge-patch+json"}},
	} {
		before := s.lastSeq()
		r := s.do(tc.method, tc.path, tc.body, tc.headers...)
		require.Equal(t, http.StatusMethodNotAllowed, r.Code, "%s %s: %s", tc.method, tc.path, r.Body)
		require.Contains(t, string(r.Body), "remediation", "%s: the answer says who writes them", tc.method)
		require.Equal(t, before, s.lastSeq(), "%s stored nothing", tc.method)
	}

	r = s.do(http.MethodDelete, "/api/v1/tenants/acme/remediations/workers-0-a", nil)
	require.Equal(t, http.StatusConflict, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), "is being replaced")
	r = s.do(http.MethodDelete, "/api/v1/tenants/acme/remediations/workers-0-b", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
}
