package webui

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var auditRowPattern = regexp.MustCompile(`<tr data-audit-seq="(\d+)">`)

// auditRows counts the records a page of the audit log shows.
func auditRows(body string) int { return len(auditRowPattern.FindAllString(body, -1)) }

func TestAuditPageListsAndFilters(t *testing.T) {
	s := newUIStack(t)
	admin := s.signIn("boss", "admin")
	viewer := s.signIn("peek", "view")
	admin.get("/ui/settings")
	viewer.get("/ui/settings/tokens")
	require.Equal(t, http.StatusCreated, admin.hx(http.MethodPost, "/ui/settings/providers",
		url.Values{"metadata.name": {"emu"}, "spec.type": {"emulated"}, "spec.config": {`{"endpoint":"http://127.0.0.1:1"}`}}).Code)
	require.Equal(t, http.StatusCreated, viewer.hx(http.MethodPost, "/ui/settings/tokens", url.Values{"metadata.name": {"peek-ci"}}).Code)
	require.Equal(t, http.StatusForbidden, viewer.hx(http.MethodDelete, "/ui/settings/providers/emu", nil).Code)
	s.create("/tenants", map[string]any{"apiVersion": "rezuscloud.io/v1", "kind": "Tenant", "metadata": map[string]any{"name": "demo"}, "spec": map[string]any{}})

	var all page
	require.Eventually(t, func() bool {
		all = admin.get("/ui/settings/audit")
		return all.Code == http.StatusOK && strings.Contains(all.Body, "DELETE /api/v1/providers/emu") &&
			strings.Contains(all.Body, "POST /api/v1/tenants")
	}, 10*time.Second, 5*time.Millisecond)
	require.Contains(t, all.Body, "POST /api/v1/providers")
	require.Contains(t, all.Body, "POST /api/v1/apitokens")
	require.Contains(t, all.Body, `aria-current="page" data-tab="Audit log"`)
	// Newest first: the tenant was created last.
	require.Less(t, strings.Index(all.Body, "POST /api/v1/tenants"), strings.Index(all.Body, "POST /api/v1/providers"))
	require.NotContains(t, all.Body, `data-testid="audit-older"`)

	t.Run("actor", func(t *testing.T) {
		p := admin.hxGet("/ui/settings/audit?actor=peek")
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.NotContains(t, p.Body, "<html", "htmx gets the filters and the table only")
		require.Contains(t, p.Body, `value="peek"`)
		require.Contains(t, p.Body, "POST /api/v1/apitokens")
		require.Contains(t, p.Body, "DELETE /api/v1/providers/emu")
		require.NotContains(t, p.Body, "POST /api/v1/providers<")
		require.NotContains(t, p.Body, "POST /api/v1/tenants")
	})
	t.Run("kind", func(t *testing.T) {
		p := admin.hxGet("/ui/settings/audit?kind=Provider")
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Equal(t, 2, auditRows(p.Body), p.Body)
		require.NotContains(t, p.Body, "apitokens")
	})
	t.Run("tenant", func(t *testing.T) {
		p := admin.hxGet("/ui/settings/audit?tenant=demo")
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Equal(t, 1, auditRows(p.Body), p.Body)
		require.Contains(t, p.Body, "POST /api/v1/tenants")
	})
	t.Run("since", func(t *testing.T) {
		future := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04")
		p := admin.hxGet("/ui/settings/audit?since=" + url.QueryEscape(future))
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Equal(t, 0, auditRows(p.Body))
		require.Contains(t, p.Body, "No audit entries match.")
		past := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
		p = admin.hxGet("/ui/settings/audit?since=" + url.QueryEscape(past))
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Equal(t, auditRows(all.Body), auditRows(p.Body))
	})
	t.Run("bad filters", func(t *testing.T) {
		for _, tc := range []struct{ query, field string }{
			{"since=yesterday", "since"},
			{"kind=Gadget", "kind"},
			{"tenant=Not_A_Name", "tenant"},
		} {
			p := admin.hxGet("/ui/settings/audit?" + tc.query)
			require.Equal(t, http.StatusBadRequest, p.Code, p.Body)
			require.Contains(t, p.Body, `data-field-error="`+tc.field+`"`, tc.query)
			require.Contains(t, p.Body, `data-testid="audit-filters"`)
			full := admin.get("/ui/settings/audit?" + tc.query)
			require.Equal(t, http.StatusBadRequest, full.Code)
			require.Contains(t, full.Body, `data-field-error="`+tc.field+`"`)
			require.Contains(t, full.Body, "<html")
		}
	})
}

func TestAuditPagesBackToOlderRecords(t *testing.T) {
	s := newUIStack(t)
	admin := s.signIn("boss", "admin")
	total := auditPageSize + 7
	for i := range total {
		code, _ := s.apiRaw(http.MethodDelete, fmt.Sprintf("/providers/gone-%d", i), nil)
		require.Equal(t, http.StatusNotFound, code)
	}
	q := "?kind=Provider"
	var first page
	require.Eventually(t, func() bool {
		first = admin.get("/ui/settings/audit" + q)
		return strings.Contains(first.Body, fmt.Sprintf("/providers/gone-%d<", total-1))
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, auditPageSize, auditRows(first.Body))
	require.NotContains(t, first.Body, "/providers/gone-0<")
	m := regexp.MustCompile(`hx-get="(/ui/settings/audit\?[^"]+)"[^>]*data-testid="audit-older"`).FindStringSubmatch(first.Body)
	require.NotNil(t, m, first.Body)
	older := admin.hxGet(strings.ReplaceAll(m[1], "&amp;", "&"))
	require.Equal(t, http.StatusOK, older.Code, older.Body)
	require.Equal(t, total-auditPageSize, auditRows(older.Body))
	require.Contains(t, older.Body, "/providers/gone-0<")
	require.NotContains(t, older.Body, fmt.Sprintf("/providers/gone-%d<", total-1))
	require.NotContains(t, older.Body, `data-testid="audit-older"`)
	require.Contains(t, older.Body, `data-testid="audit-newest"`)
	require.Contains(t, older.Body, `value="Provider"`, "paging keeps the filters")
}

func TestAPISince(t *testing.T) {
	for in, want := range map[string]string{
		"2026-01-31T08:00":     "2026-01-31T08:00:00Z",
		"2026-01-31T08:00:05":  "2026-01-31T08:00:05Z",
		"2026-01-31 08:00":     "2026-01-31T08:00:00Z",
		"2026-01-31T08:00:00Z": "2026-01-31T08:00:00Z",
		"42":                   "42",
		"yesterday":            "yesterday",
	} {
		require.Equal(t, want, apiSince(in), in)
	}
}
