package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
)

func quickRecheck(c *handlers.Config) { c.AccessRecheckInterval = 50 * time.Millisecond }

func names(t *testing.T, r response) []string {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	var l struct {
		Items []domain.Object `json:"items"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &l))
	var out []string
	for _, o := range l.Items {
		n := o.Metadata.Name
		if o.Metadata.Tenant != "" {
			n = o.Metadata.Tenant + "/" + n
		}
		out = append(out, n)
	}
	return out
}

// Team A administers its tenant and sees nothing of team B's: lists leave B
// out, B's objects answer 404 (not 403), events and the audit log show only A's.
func TestTenantBindingsSeeOnlyTheirTenants(t *testing.T) {
	s, _ := newAuditedStack(t, nil)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", map[string]string{"team": "a"}))
	s.mustCreate("/api/v1/tenants", tenantBody("beta", map[string]string{"team": "b"}))
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 1))
	s.mustCreate("/api/v1/tenants/beta/nodegroups", nodeGroupBody("workers", 1))
	a := bearer(s.createBoundUser("alice", domain.RoleNone, `[{"role":"admin","tenantSelector":"team=a"}]`))

	require.Equal(t, []string{"acme"}, names(t, s.do(http.MethodGet, "/api/v1/tenants", nil, a...)))
	require.Equal(t, []string{"acme/workers"}, names(t, s.do(http.MethodGet, "/api/v1/nodegroups", nil, a...)))
	for _, p := range []string{"/api/v1/tenants/beta", "/api/v1/tenants/beta/nodegroups", "/api/v1/tenants/beta/nodegroups/workers", "/api/v1/tenants/nope"} {
		r := s.do(http.MethodGet, p, nil, a...)
		require.Equal(t, http.StatusNotFound, r.Code, p)
	}
	r := s.do(http.MethodPatch, "/api/v1/tenants/beta/nodegroups/workers", `{"spec":{"count":2}}`, append(a, "Content-Type", "application/merge-patch+json")...)
	require.Equal(t, http.StatusNotFound, r.Code, string(r.Body))
	// Within its tenant, the binding's role: admin.
	r = s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"count":2}}`, append(a, "Content-Type", "application/merge-patch+json")...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	// A new tenant needs the global edit role.
	r = s.do(http.MethodPost, "/api/v1/tenants", tenantBody("gamma", map[string]string{"team": "a"}), a...)
	require.Equal(t, http.StatusForbidden, r.Code, string(r.Body))

	er := s.do(http.MethodGet, "/api/v1/events?limit=1000", nil, a...)
	require.Equal(t, http.StatusOK, er.Code, string(er.Body))
	var page eventPage
	require.NoError(t, json.Unmarshal(er.Body, &page))
	require.NotEmpty(t, page.Items)
	for _, it := range page.Items {
		tenant := it.Object.Metadata.Tenant
		if it.Object.Kind == domain.TenantKind.Kind {
			tenant = it.Object.Metadata.Name
		}
		require.Equal(t, "acme", tenant, "event %d %s", it.Seq, it.Type)
	}
	require.Eventually(t, func() bool {
		audit := s.do(http.MethodGet, "/api/v1/audit?limit=1000", nil, a...)
		return audit.Code == http.StatusOK && strings.Contains(string(audit.Body), `"tenant":"acme"`)
	}, 10*time.Second, 20*time.Millisecond)
	audit := s.do(http.MethodGet, "/api/v1/audit?limit=1000", nil, a...)
	require.NotContains(t, string(audit.Body), `"tenant":"beta"`)
	require.Contains(t, string(s.do(http.MethodGet, "/api/v1/audit?limit=1000", nil).Body), `"tenant":"beta"`, "the admin reads every record")

	// A viewer of acme reads it but changes nothing, and reads no audit.
	v := bearer(s.createBoundUser("victor", domain.RoleNone, `[{"role":"view","tenants":["acme"]}]`))
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", nil, v...).Code)
	r = s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"count":3}}`, append(v, "Content-Type", "application/merge-patch+json")...)
	require.Equal(t, http.StatusForbidden, r.Code, string(r.Body))
	require.Equal(t, http.StatusForbidden, s.do(http.MethodGet, "/api/v1/audit", nil, v...).Code)
}

// An editor of team=a tenants who is admin of sandbox=true tenants cannot
// make itself admin of a team=a tenant by labelling it sandbox.
func TestTenantLabelsCannotRaiseOwnRole(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", map[string]string{"team": "a"}))
	e := bearer(s.createBoundUser("eve", domain.RoleNone, `[{"role":"edit","tenantSelector":"team=a"},{"role":"admin","tenantSelector":"sandbox=true"}]`))
	r := s.do(http.MethodPatch, "/api/v1/tenants/acme", `{"metadata":{"labels":{"sandbox":"true"}}}`, append(e, "Content-Type", "application/merge-patch+json")...)
	require.Equal(t, http.StatusForbidden, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), "admin")
	// Labels that do not raise the role are fine.
	r = s.do(http.MethodPatch, "/api/v1/tenants/acme", `{"metadata":{"labels":{"tier":"gold"}}}`, append(e, "Content-Type", "application/merge-patch+json")...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
}

// A tenant whose labels move out of a binding's selector leaves the user's
// view at once: a watcher of tenants gets DELETED, and ADDED when it comes back.
func TestTenantLeavingSelectorIsDeletedForWatchers(t *testing.T) {
	s := newStack(t, quickRecheck)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", map[string]string{"env": "prod"}))
	s.mustCreate("/api/v1/tenants", tenantBody("beta", map[string]string{"env": "dev"}))
	tok := s.createBoundUser("pat", domain.RoleNone, `[{"role":"view","tenantSelector":"env=prod"}]`)
	w := s.watch("/api/v1/tenants?watch=true", "Authorization", "Bearer "+tok)
	ev := w.next(t)
	require.Equal(t, "ADDED", ev.Event)
	require.Equal(t, "acme", ev.object(t).Metadata.Name)

	patch := func(env string) {
		r := s.do(http.MethodPatch, "/api/v1/tenants/acme", `{"metadata":{"labels":{"env":"`+env+`"}}}`, "Content-Type", "application/merge-patch+json")
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	}
	patch("dev")
	ev = w.next(t)
	require.Equal(t, "DELETED", ev.Event, ev.Data)
	require.Equal(t, "acme", ev.object(t).Metadata.Name)
	patch("prod")
	ev = w.next(t)
	require.Equal(t, "ADDED", ev.Event, ev.Data)
	require.Equal(t, "acme", ev.object(t).Metadata.Name)
	require.Equal(t, []string{"acme"}, names(t, s.do(http.MethodGet, "/api/v1/tenants", nil, "Authorization", "Bearer "+tok)))
}

// A token narrowed by bindings is never wider than its owner: refused at
// creation when it asks for more, capped at every use when the owner loses
// access later, fixed once made, and it makes no new tokens.
func TestNarrowedTokens(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.mustCreate("/api/v1/tenants", tenantBody("beta", nil))
	owner := bearer(s.createBoundUser("olga", domain.RoleNone, `[{"role":"edit","tenants":["acme","beta"]}]`))

	r := s.do(http.MethodPost, "/api/v1/apitokens", `{"spec":{"bindings":[{"role":"admin","tenants":["acme"]}]}}`, owner...)
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), "spec.bindings[0].role")

	tok, name := s.createToken(`{"spec":{"bindings":[{"role":"edit","tenants":["acme"]}]}}`, owner...)
	nt := bearer(tok)
	require.Equal(t, []string{"acme"}, names(t, s.do(http.MethodGet, "/api/v1/tenants", nil, nt...)))
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/beta", nil, nt...).Code)
	r = s.do(http.MethodPost, "/api/v1/apitokens", `{}`, nt...)
	require.Equal(t, http.StatusForbidden, r.Code, "a narrowed token makes no wider token: %s", r.Body)
	r = s.do(http.MethodPatch, "/api/v1/apitokens/"+name, `{"spec":{"bindings":[{"role":"edit","tenants":["beta"]}]}}`, append(owner, "Content-Type", "application/merge-patch+json")...)
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))

	// The owner is narrowed to view on acme: the token follows at its next use.
	r = s.do(http.MethodPatch, "/api/v1/users/olga", `{"spec":{"bindings":[{"role":"view","tenants":["acme"]}]}}`, "Content-Type", "application/merge-patch+json")
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	r = s.do(http.MethodPatch, "/api/v1/tenants/acme", `{"metadata":{"labels":{"x":"y"}}}`, append(nt, "Content-Type", "application/merge-patch+json")...)
	require.Equal(t, http.StatusForbidden, r.Code, string(r.Body))
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/acme", nil, nt...).Code)
}

// Issue 13, defect 3: open watches and follows end (a final ERROR event with
// a Status) when the token is revoked, the user disabled or deleted, or the
// binding that let the caller see the tenant goes.
func TestStreamsEndWhenAccessGoes(t *testing.T) {
	s := newStack(t, quickRecheck).withProvider()
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	open := func(tok, path string) *watchStream {
		return s.watch(path, "Authorization", "Bearer "+tok)
	}
	ended := func(w *watchStream, code int) {
		t.Helper()
		streamEnds(t, w, code)
	}
	paths := []string{"/api/v1/tenants/acme/nodegroups?watch=true", "/api/v1/events?follow=true"}

	t.Run("token revoked", func(t *testing.T) {
		s.createUser("tom", domain.RoleEdit, alicePassword)
		tok, name := s.createToken(`{}`, bearer(s.sessionToken("tom", alicePassword))...)
		var ws []*watchStream
		for _, p := range paths {
			ws = append(ws, open(tok, p))
		}
		require.Equal(t, http.StatusOK, s.do(http.MethodDelete, "/api/v1/apitokens/"+name, nil).Code)
		for _, w := range ws {
			ended(w, http.StatusUnauthorized)
		}
	})
	t.Run("user disabled", func(t *testing.T) {
		s.createUser("dora", domain.RoleView, alicePassword)
		tok := s.sessionToken("dora", alicePassword)
		var ws []*watchStream
		for _, p := range paths {
			ws = append(ws, open(tok, p))
		}
		r := s.do(http.MethodPatch, "/api/v1/users/dora", `{"spec":{"disabled":true}}`, "Content-Type", "application/merge-patch+json")
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		for _, w := range ws {
			ended(w, http.StatusUnauthorized)
		}
	})
	t.Run("user deleted", func(t *testing.T) {
		s.createUser("dan", domain.RoleView, alicePassword)
		tok := s.sessionToken("dan", alicePassword)
		var ws []*watchStream
		for _, p := range paths {
			ws = append(ws, open(tok, p))
		}
		require.Equal(t, http.StatusOK, s.do(http.MethodDelete, "/api/v1/users/dan", nil).Code)
		for _, w := range ws {
			ended(w, http.StatusUnauthorized)
		}
	})
	t.Run("binding removed", func(t *testing.T) {
		tok := s.createBoundUser("bob", domain.RoleNone, `[{"role":"view","tenants":["acme"]}]`)
		w := open(tok, paths[0])
		r := s.do(http.MethodPatch, "/api/v1/users/bob", `{"spec":{"bindings":null}}`, "Content-Type", "application/merge-patch+json")
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		ended(w, http.StatusNotFound)
	})
	// The streams of everyone else go on.
	w := s.watch("/api/v1/tenants/acme/nodegroups?watch=true")
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("late", 1))
	require.True(t, strings.Contains(w.next(t).Data, `"late"`))
}
