package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// newAuditedStack is newStack serving an API that keeps an audit log.
// extra, when set, adds routes before the server starts; mutate adjusts the
// API's config. The tenant finalizer keeps running in the background but the
// API does not call it.
func newAuditedStack(t *testing.T, extra func(*handlers.API), mutate ...func(*handlers.Config)) (*stack, *eventstore.AuditLog) {
	t.Helper()
	s := newStack(t).withProvider()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	audit, err := eventstore.OpenAudit(ctx, s.env.Store, eventstore.AuditConfig{})
	require.NoError(t, err)
	s.srv.Close()
	s.api.StopWatches()
	cfg := handlers.Config{}
	for _, m := range mutate {
		m(&cfg)
	}
	s.api = handlers.New(cfg, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector,
		Identity: s.identity, Audit: audit})
	if extra != nil {
		extra(s.api)
	}
	s.srv = httptest.NewServer(s.api.Handler())
	return s, audit
}

// auditRecords waits until the audit log holds n records and returns them.
func auditRecords(t *testing.T, audit *eventstore.AuditLog, n int) []eventstore.AuditRecord {
	t.Helper()
	var recs []eventstore.AuditRecord
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		recs, _, err = audit.Query(context.Background(), eventstore.AuditQuery{Limit: 1000})
		require.NoError(c, err)
		require.LessOrEqual(c, len(recs), n, "more audit records than requests: %+v", recs)
		assert.Len(c, recs, n)
	}, 10*time.Second, 5*time.Millisecond)
	return recs
}

// auditPage is an /api/v1/audit answer.
type auditPage struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []eventstore.AuditRecord `json:"items"`
}

func (s *stack) auditPage(t *testing.T, query string) auditPage {
	t.Helper()
	r := s.do(http.MethodGet, "/api/v1/audit"+query, nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	var p auditPage
	require.NoError(t, json.Unmarshal(r.Body, &p), string(r.Body))
	require.Equal(t, "AuditRecordList", p.Kind)
	require.Equal(t, domain.APIVersion, p.APIVersion)
	require.NotNil(t, p.Items, "items is [] when empty")
	return p
}

func auditPaths(recs []eventstore.AuditRecord) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

func TestAuditRecordsWrites(t *testing.T) {
	const secret = "hunter2-TOP-SECRET"
	s, audit := newAuditedStack(t, nil)
	ten := s.do(http.MethodPost, "/api/v1/tenants", tenantBody("acme", nil), "X-Request-Id", "req-tenant")
	require.Equal(t, http.StatusCreated, ten.Code, string(ten.Body))
	ev, err := s.env.Store.Load(context.Background(), domain.Ref{Kind: "Tenant", Name: "acme"})
	require.NoError(t, err)
	actor := ev.Event.Actor
	require.NotEmpty(t, actor)

	body := nodeGroupBody("workers", 1)
	body["metadata"].(map[string]any)["annotations"] = map[string]string{"note": secret}
	const ng = "/api/v1/tenants/acme/nodegroups"
	type want struct {
		actor, kind, tenant, name string
		code                      int
	}
	tests := []struct {
		name    string
		method  string
		path    string
		body    any
		headers []string
		want    want
	}{
		{name: "create", method: http.MethodPost, path: ng, body: body,
			// The route names no object; the handler records the name from the body.
			want: want{actor: actor, kind: "NodeGroup", tenant: "acme", name: "workers", code: http.StatusCreated}},
		{name: "patch", method: http.MethodPatch, path: ng + "/workers", body: `{"metadata":{"labels":{"pw":"` + secret + `"}}}`,
			want: want{actor: actor, kind: "NodeGroup", tenant: "acme", name: "workers", code: http.StatusOK}},
		{name: "invalid patch", method: http.MethodPatch, path: ng + "/workers", body: `{"spec":{"count":-3,"provider":"` + secret + `"}}`,
			want: want{actor: actor, kind: "NodeGroup", tenant: "acme", name: "workers", code: http.StatusUnprocessableEntity}},
		{name: "put status", method: http.MethodPut, path: ng + "/workers/status",
			body: `{"metadata":{"name":"workers"},"status":{"replicas":1}}`,
			want: want{actor: actor, kind: "NodeGroup", tenant: "acme", name: "workers", code: http.StatusOK}},
		{name: "a secret in the query string", method: http.MethodDelete, path: ng + "/workers?resourceVersion=" + secret,
			want: want{actor: actor, kind: "NodeGroup", tenant: "acme", name: "workers", code: http.StatusConflict}},
		{name: "tenant patch", method: http.MethodPatch, path: "/api/v1/tenants/acme", body: `{"metadata":{"labels":{"a":"b"}}}`,
			want: want{actor: actor, kind: "Tenant", tenant: "acme", name: "acme", code: http.StatusOK}},
		{name: "delete", method: http.MethodDelete, path: ng + "/workers",
			want: want{actor: actor, kind: "NodeGroup", tenant: "acme", name: "workers", code: http.StatusOK}},
	}
	// Refused requests without an identity (no or a wrong token, no such
	// route) are sampled: TestRefusedAnonymousRequestsAreSampled.
	// Reads are not recorded.
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/acme", nil).Code)
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, ng, nil).Code)

	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqID := fmt.Sprintf("req-%d", i)
			headers := append([]string{"X-Request-Id", reqID}, tt.headers...)
			if tt.name == "put status" {
				cur := s.do(http.MethodGet, ng+"/workers", nil).object(t)
				tt.body = fmt.Sprintf(`{"metadata":{"name":"workers","resourceVersion":%q},"status":{"replicas":1}}`, cur.Metadata.ResourceVersion)
			}
			r := s.do(tt.method, tt.path, tt.body, headers...)
			require.Equal(t, tt.want.code, r.Code, string(r.Body))
			require.NotEqual(t, reqID, r.Header.Get("X-Request-Id"), "the server makes its own request id")

			recs := auditRecords(t, audit, i+2)
			got := recs[len(recs)-1]
			require.Equal(t, r.Header.Get("X-Request-Id"), got.RequestID)
			require.Equal(t, tt.method, got.Method)
			require.Equal(t, strings.SplitN(tt.path, "?", 2)[0], got.Path, "the path without the query string")
			require.Equal(t, tt.want.code, got.Code)
			require.Equal(t, tt.want.actor, got.Actor)
			if tt.want.actor != "" {
				require.Equal(t, domain.RoleAdmin, got.Role)
			} else {
				require.Empty(t, got.Role)
			}
			require.Equal(t, tt.want.kind, got.Kind)
			require.Equal(t, tt.want.tenant, got.Tenant)
			require.Equal(t, tt.want.name, got.Name)
			require.Equal(t, "127.0.0.1", got.ClientAddress)
			require.WithinDuration(t, time.Now(), got.Time, time.Minute)
		})
	}

	t.Run("the tenant's create", func(t *testing.T) {
		got := auditRecords(t, audit, len(tests)+1)[0]
		require.Equal(t, ten.Header.Get("X-Request-Id"), got.RequestID)
		require.Equal(t, "POST /api/v1/tenants", got.Method+" "+got.Path)
		require.Equal(t, "Tenant", got.Kind)
		require.Equal(t, http.StatusCreated, got.Code)
	})

	t.Run("no body, header or query content is stored", func(t *testing.T) {
		st, err := s.env.Store.JetStream().Stream(context.Background(), eventstore.AuditStreamName)
		require.NoError(t, err)
		info, err := st.Info(context.Background())
		require.NoError(t, err)
		require.Equal(t, uint64(len(tests)+1), info.State.Msgs)
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			msg, err := st.GetMsg(context.Background(), seq)
			require.NoError(t, err)
			require.NotContains(t, string(msg.Data), secret, "record %d", seq)
			require.NotContains(t, string(msg.Data), "hunter2", "record %d", seq)
			require.NotContains(t, string(msg.Data), testToken, "record %d", seq)
			require.NotContains(t, string(msg.Data), "resourceVersion", "record %d", seq)
		}
	})

	t.Run("subjects carry kind and tenant", func(t *testing.T) {
		st, err := s.env.Store.JetStream().Stream(context.Background(), eventstore.AuditStreamName)
		require.NoError(t, err)
		first, err := st.GetMsg(context.Background(), 1)
		require.NoError(t, err)
		require.Equal(t, "rezus.audit.tenant.acme", first.Subject, "a tenant's own records carry its name as the tenant")
		second, err := st.GetMsg(context.Background(), 2)
		require.NoError(t, err)
		require.Equal(t, "rezus.audit.nodegroup.acme", second.Subject)
	})

	t.Run("served by the API", func(t *testing.T) {
		p := s.auditPage(t, "")
		require.Len(t, p.Items, len(tests)+1)
		for i, rec := range p.Items {
			require.Equal(t, uint64(i+1), rec.Seq)
		}
		require.Empty(t, p.Metadata.Continue)
	})
}

func TestAuditPanicAndCredentialDownloads(t *testing.T) {
	s, audit := newAuditedStack(t, func(api *handlers.API) {
		e := api.Echo()
		e.POST("/api/v1/tenants/:tenant/boom", func(echo.Context) error { panic("boom") })
		e.GET("/api/v1/tenants/:tenant/kubeconfig", func(c echo.Context) error {
			return c.String(http.StatusOK, "apiVersion: v1\nkind: Config\n")
		})
		e.GET("/ui/tenants/:tenant/talosconfig.yaml", func(c echo.Context) error {
			api.AuditCredentialDownload(c, handlers.CredentialTalosconfig, c.Param("tenant"), "")
			return c.String(http.StatusOK, "context: acme\n")
		})
		e.GET("/ui/other", func(c echo.Context) error { return c.String(http.StatusOK, "not a credential") })
	})

	require.Equal(t, http.StatusInternalServerError, s.do(http.MethodPost, "/api/v1/tenants/acme/boom", `{}`).Code)
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/acme/kubeconfig", nil).Code)
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/ui/other", nil).Code)
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/ui/tenants/acme/talosconfig.yaml", nil).Code)

	recs := auditRecords(t, audit, 3)
	require.Equal(t, []string{"POST /api/v1/tenants/acme/boom", "GET /api/v1/tenants/acme/kubeconfig", "GET /ui/tenants/acme/talosconfig.yaml"}, auditPaths(recs))
	require.Equal(t, http.StatusInternalServerError, recs[0].Code)
	require.Equal(t, "Tenant", recs[0].Kind, "a subresource of the tenant")
	require.Equal(t, "acme", recs[0].Name)
	require.Equal(t, handlers.CredentialKubeconfig, recs[1].Kind)
	require.Equal(t, "acme", recs[1].Tenant)
	require.Equal(t, http.StatusOK, recs[1].Code)
	require.Equal(t, handlers.CredentialTalosconfig, recs[2].Kind)
	require.Equal(t, "acme", recs[2].Tenant)

	p := s.auditPage(t, "?kind=kubeconfig")
	require.Equal(t, []string{"GET /api/v1/tenants/acme/kubeconfig"}, auditPaths(p.Items))
}

func TestAuditQueryParameters(t *testing.T) {
	s, audit := newAuditedStack(t, nil)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))                            // 1
	s.mustCreate("/api/v1/tenants", tenantBody("globex", nil))                          // 2
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("a", 1))              // 3
	s.mustCreate("/api/v1/tenants/globex/nodegroups", nodeGroupBody("b", 1))            // 4
	s.do(http.MethodPatch, "/api/v1/tenants/acme", `{"metadata":{"labels":{"x":"y"}}}`) // 5
	// 6: a 401 without an identity, sampled: stopping the sampler writes it now.
	stopSampler := runAuditSampler(t, s.api)
	s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", `{}`, "Authorization", "")
	auditRecords(t, audit, 5)
	stopSampler()
	auditRecords(t, audit, 6)
	s.do(http.MethodDelete, "/api/v1/tenants/globex/nodegroups/b", nil)                 // 7
	s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/a", `{"spec":{"count":3}}`) // 8
	recs := auditRecords(t, audit, 8)
	actor := recs[0].Actor
	require.NotEmpty(t, actor)

	st, err := s.env.Store.JetStream().Stream(context.Background(), eventstore.AuditStreamName)
	require.NoError(t, err)
	storedAt := func(seq uint64) string {
		msg, err := st.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		return url.QueryEscape(msg.Time.Format(time.RFC3339Nano))
	}

	tests := []struct {
		name         string
		query        string
		want         []uint64
		wantContinue string
	}{
		{name: "everything", query: "", want: []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "actor", query: "?actor=" + url.QueryEscape(actor), want: []uint64{1, 2, 3, 4, 5, 7, 8}},
		{name: "unknown actor", query: "?actor=mallory", want: []uint64{}},
		{name: "kind plural", query: "?kind=nodegroups", want: []uint64{3, 4, 6, 7, 8}},
		{name: "kind singular", query: "?kind=nodegroup", want: []uint64{3, 4, 6, 7, 8}},
		{name: "Kind", query: "?kind=NodeGroup", want: []uint64{3, 4, 6, 7, 8}},
		{name: "tenant", query: "?tenant=acme", want: []uint64{1, 3, 5, 6, 8}},
		{name: "kind and tenant", query: "?kind=tenants&tenant=acme", want: []uint64{1, 5}},
		{name: "since a sequence", query: "?since=6", want: []uint64{7, 8}},
		{name: "since a time", query: "?since=" + storedAt(3), want: []uint64{3, 4, 5, 6, 7, 8}},
		{name: "until a time", query: "?until=" + storedAt(3), want: []uint64{1, 2, 3}},
		{name: "since and until", query: "?since=2&until=4", want: []uint64{3, 4}},
		{name: "limit", query: "?limit=3", want: []uint64{1, 2, 3}, wantContinue: "3"},
		{name: "continue", query: "?limit=3&continue=3", want: []uint64{4, 5, 6}, wantContinue: "6"},
		{name: "last page", query: "?limit=3&continue=6", want: []uint64{7, 8}},
		{name: "filtered page", query: "?limit=2&tenant=acme&actor=" + url.QueryEscape(actor), want: []uint64{1, 3}, wantContinue: "3"},
		{name: "filtered next page", query: "?limit=2&tenant=acme&continue=3&actor=" + url.QueryEscape(actor), want: []uint64{5, 8}},
		// newest=N: the newest N matching records, oldest first, never with continue.
		{name: "newest", query: "?newest=3", want: []uint64{6, 7, 8}},
		{name: "newest, exactly all", query: "?newest=8", want: []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "newest, more than there are", query: "?newest=100", want: []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "newest, the most", query: "?newest=10000", want: []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "newest of an actor", query: "?newest=2&actor=" + url.QueryEscape(actor), want: []uint64{7, 8}},
		{name: "newest of an actor in a tenant", query: "?newest=2&tenant=acme&actor=" + url.QueryEscape(actor), want: []uint64{5, 8}},
		{name: "newest of an unknown actor", query: "?newest=2&actor=mallory", want: []uint64{}},
		{name: "newest of a kind", query: "?newest=1&kind=tenants", want: []uint64{5}},
		{name: "newest of a kind in a tenant", query: "?newest=2&kind=nodegroups&tenant=globex", want: []uint64{4, 7}},
		{name: "newest, the older page", query: "?newest=3&until=5", want: []uint64{3, 4, 5}},
		{name: "newest of a tenant, the older page", query: "?newest=2&tenant=acme&until=5", want: []uint64{3, 5}},
		{name: "newest since", query: "?newest=5&since=5", want: []uint64{6, 7, 8}},
		{name: "newest since and until", query: "?newest=2&since=2&until=4", want: []uint64{3, 4}},
		{name: "newest until a time", query: "?newest=1&until=" + storedAt(3), want: []uint64{3}},
		{name: "newest, not following", query: "?newest=1&follow=false", want: []uint64{8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := s.auditPage(t, tt.query)
			got := []uint64{}
			for _, r := range p.Items {
				got = append(got, r.Seq)
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.wantContinue, p.Metadata.Continue)
		})
	}

	bad := []struct {
		query, field string
	}{
		{"?since=yesterday", "since"},
		{"?until=2026-13-01T00:00:00Z", "until"},
		{"?until=0", "until"},
		{"?limit=-1", "limit"},
		{"?limit=10001", "limit"},
		{"?limit=ten", "limit"},
		{"?continue=abc", "continue"},
		{"?kind=widgets", "kind"},
		{"?tenant=Not.A.Name", "tenant"},
		{"?actor=" + strings.Repeat("x", 300), "actor"},
		{"?follow=maybe", "follow"},
		{"?follow=true&until=5", "until"},
		{"?newest=0", "newest"},
		{"?newest=-3", "newest"},
		{"?newest=abc", "newest"},
		{"?newest=10001", "newest"},
		{"?newest=2&follow=true", "newest"},
		{"?newest=2&continue=3", "newest"},
		{"?newest=2&limit=3", "newest"},
	}
	for _, tt := range bad {
		t.Run("bad "+tt.field+" "+tt.query[:min(len(tt.query), 24)], func(t *testing.T) {
			r := s.do(http.MethodGet, "/api/v1/audit"+tt.query, nil)
			require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, domain.ReasonBadRequest, st.Reason)
			require.NotNil(t, st.Details)
			var fields []string
			for _, c := range st.Details.Causes {
				fields = append(fields, c.Field)
			}
			require.Contains(t, fields, tt.field)
		})
	}

	t.Run("authentication is required", func(t *testing.T) {
		r := s.do(http.MethodGet, "/api/v1/audit", nil, "Authorization", "")
		require.Equal(t, http.StatusUnauthorized, r.Code)
	})
}

func TestAuditFollow(t *testing.T) {
	s, audit := newAuditedStack(t, nil)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	auditRecords(t, audit, 1)

	all := s.watch("/api/v1/audit?follow=true")
	acme := s.watch("/api/v1/audit?follow=true&since=1&kind=nodegroups&tenant=acme")

	ev := all.next(t)
	require.Equal(t, "AUDIT", ev.Event)
	require.Equal(t, "1", ev.ID)

	s.mustCreate("/api/v1/tenants", tenantBody("globex", nil))
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("w", 1))
	for _, want := range []struct {
		w    *watchStream
		seq  string
		path string
	}{
		{all, "2", "/api/v1/tenants"},
		{all, "3", "/api/v1/tenants/acme/nodegroups"},
		{acme, "3", "/api/v1/tenants/acme/nodegroups"},
	} {
		ev := want.w.next(t)
		require.Equal(t, "AUDIT", ev.Event)
		require.Equal(t, want.seq, ev.ID)
		var body struct {
			Type   string                 `json:"type"`
			Object eventstore.AuditRecord `json:"object"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &body), ev.Data)
		require.Equal(t, "AUDIT", body.Type)
		require.Equal(t, want.path, body.Object.Path)
		require.Equal(t, want.seq, strconv.FormatUint(body.Object.Seq, 10))
		require.Equal(t, http.StatusCreated, body.Object.Code)
	}

	t.Run("resumes after Last-Event-ID", func(t *testing.T) {
		w := s.watch("/api/v1/audit?follow=true", "Last-Event-ID", "2")
		require.Equal(t, "3", w.next(t).ID)
	})

	t.Run("ends when the server stops watches", func(t *testing.T) {
		s.api.StopWatches()
		waitEnded(t, all)
		waitEnded(t, acme)
	})
}

// waitEnded waits until the server ends a stream.
func waitEnded(t *testing.T, w *watchStream) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-w.events:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the stream did not end")
		}
	}
}

func TestAuditNotConfigured(t *testing.T) {
	s := newStack(t)
	r := s.do(http.MethodGet, "/api/v1/audit", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Code, string(r.Body))
}
