package handlers_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// auditedAs returns the records of actor but its logins, waiting until there are n.
func auditedAs(t *testing.T, audit *eventstore.AuditLog, actor string, n int) []eventstore.AuditRecord {
	t.Helper()
	var recs []eventstore.AuditRecord
	require.Eventually(t, func() bool {
		all, _, err := audit.Query(context.Background(), eventstore.AuditQuery{Limit: 10000})
		if err != nil {
			return false
		}
		recs = recs[:0]
		for _, r := range all {
			if r.Actor == actor && r.Path != "/api/v1/auth/login" {
				recs = append(recs, r)
			}
		}
		return len(recs) >= n
	}, 10*time.Second, 5*time.Millisecond, "want %d audit records of %s", n, actor)
	require.Len(t, recs, n, "%+v", recs)
	return recs
}

// TestStatusWritesNeedAdmin: the /status subresources are written by the
// controllers in process; by hand only an admin may write them, and refused
// and allowed writes alike are audited (issue 13, defect 16).
func TestStatusWritesNeedAdmin(t *testing.T) {
	ts := newTalosStack(t)
	s := ts.stack
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 1))
	s.createUser("u-edit", domain.RoleEdit, "password for edit user")
	edit := bearer(s.sessionToken("u-edit", "password for edit user"))

	paths := []string{
		"/api/v1/tenants/acme/status",
		"/api/v1/tenants/acme/nodegroups/workers/status",
		"/api/v1/tenants/acme/machines/m1/status",
		"/api/v1/tenants/acme/applies/a1/status",
		"/api/v1/tenants/acme/upgrades/u1/status",
	}
	for _, p := range paths {
		for _, m := range []string{http.MethodPut, http.MethodPatch} {
			r := s.do(m, p, `{"status":{}}`, edit...)
			require.Equal(t, http.StatusForbidden, r.Code, "%s %s as edit: %s", m, p, r.Body)
			require.Equal(t, domain.ReasonForbidden, r.status(t).Reason)
		}
		// Reading status stays open to every role.
		require.NotEqual(t, http.StatusForbidden, s.do(http.MethodGet, p, nil, edit...).Code, p)
	}
	recs := auditedAs(t, ts.audit, "u-edit", 2*len(paths))
	for _, r := range recs {
		require.Equal(t, http.StatusForbidden, r.Code, "%+v", r)
	}

	// An admin still may, and is audited.
	r := s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers/status", `{"status":{}}`)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Eventually(t, func() bool {
		all, _, err := ts.audit.Query(context.Background(), eventstore.AuditQuery{Limit: 10000})
		if err != nil {
			return false
		}
		for _, rec := range all {
			if rec.Method == http.MethodPatch && rec.Path == "/api/v1/tenants/acme/nodegroups/workers/status" && rec.Code == http.StatusOK && rec.Role == domain.RoleAdmin {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the admin's status write is audited")
}

// TestRefusedSecretReadsAudited: a refused read of anything that carries the
// tenant's secrets (the break-glass kubeconfig, a machine's or node group's
// rendered config, terraform state, a snapshot) is audited with its code, like a
// refused kubeconfig read always was (issue 13, defect 13).
func TestRefusedSecretReadsAudited(t *testing.T) {
	ts := newTalosStack(t)
	ts.acme()
	s := ts.stack
	s.createUser("u-view", domain.RoleView, "password for view user")
	view := bearer(s.sessionToken("u-view", "password for view user"))

	reads := []struct{ path, kind, name string }{
		{"/api/v1/tenants/acme/kubeconfig/admin", "KubeconfigBreakGlass", ""},
		{"/api/v1/tenants/acme/machines/cp1/config", "MachineConfig", "cp1"},
		{"/api/v1/tenants/acme/nodegroups/workers/config", "MachineConfig", "workers"},
		{"/api/v1/tenants/acme/state", "TerraformState", "acme"},
		{"/api/v1/tenants/acme/etcdbackups/b1/snapshot", "EtcdSnapshot", "b1"},
	}
	for _, rd := range reads {
		r := s.do(http.MethodGet, rd.path, nil, view...)
		require.Equal(t, http.StatusForbidden, r.Code, "%s: %s", rd.path, r.Body)
	}
	recs := auditedAs(t, ts.audit, "u-view", len(reads))
	for i, rd := range reads {
		require.Equal(t, rd.path, recs[i].Path)
		require.Equal(t, http.StatusForbidden, recs[i].Code, "%+v", recs[i])
		require.Equal(t, rd.kind, recs[i].Kind, "%+v", recs[i])
		require.Equal(t, "acme", recs[i].Tenant, "%+v", recs[i])
		require.Equal(t, rd.name, recs[i].Name, "%+v", recs[i])
		require.Equal(t, domain.RoleView, recs[i].Role)
	}
}
