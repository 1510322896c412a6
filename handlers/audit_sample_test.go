package handlers_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// fromAddress is a client whose connections come from a loopback address of
// its own, so the server sees another source.
func fromAddress(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// send makes a request through client and answers its status code.
func (s *stack) send(client *http.Client, method, path, body string, headers ...string) int {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.srv.URL+path, rd)
	require.NoError(s.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// storedAudit is every record the audit log holds once what was appended
// is acknowledged.
func storedAudit(t *testing.T, audit *eventstore.AuditLog) []eventstore.AuditRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, audit.Flush(ctx))
	recs, _, err := audit.Query(ctx, eventstore.AuditQuery{Limit: 10000})
	require.NoError(t, err)
	return recs
}

// sampledStack is an audited stack on a settable clock whose sampler of
// refused anonymous requests runs until stop, which writes what it holds.
func sampledStack(t *testing.T, mutate ...func(*handlers.Config)) (s *stack, audit *eventstore.AuditLog, clock *testClock, stop func()) {
	t.Helper()
	clock = &testClock{}
	clock.Set(time.Date(2026, 12, 1, 10, 0, 10, 0, time.UTC))
	s, audit = newAuditedStack(t, nil, append(mutate, func(c *handlers.Config) { c.Now = clock.Now })...)
	return s, audit, clock, runAuditSampler(t, s.api)
}

// runAuditSampler runs the API's sampler of refused anonymous requests until
// stop (or the test's end), which writes what it holds to the audit log.
func runAuditSampler(t *testing.T, api *handlers.API) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- api.RunAuditSampler(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(stop)
	return stop
}

// Issue 13, defect 5: refused requests without an identity are counted, not
// stored one by one: one record per source address and minute, with the
// count. Authenticated requests are recorded one by one as before.
func TestRefusedAnonymousRequestsAreSampled(t *testing.T) {
	s, audit, clock, stop := sampledStack(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	local := http.DefaultClient
	for range 1000 {
		require.Equal(t, http.StatusUnauthorized, s.send(local, http.MethodPost, "/api/v1/tenants", `{}`))
	}
	// An authenticated refusal is stored at once, as before.
	require.Equal(t, http.StatusUnprocessableEntity, s.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"Not A Name"}}`).Code)
	recs := storedAudit(t, audit)
	require.Len(t, recs, 1, "the anonymous requests are not stored one by one: %+v", recs)
	require.NotEmpty(t, recs[0].Actor)
	require.Zero(t, recs[0].Count)

	// The next minute's first refusal writes the last minute's count.
	clock.Set(t0.Add(time.Minute + 5*time.Second))
	require.Equal(t, http.StatusUnauthorized, s.send(local, http.MethodPost, "/api/v1/tenants", `{}`))
	other := fromAddress("127.0.0.2")
	for range 3 {
		require.Equal(t, http.StatusNotFound, s.send(other, http.MethodPost, "/api/v1/nothing-here", `{}`, "Authorization", "Bearer "+testToken))
	}
	recs = storedAudit(t, audit)
	require.Len(t, recs, 2)
	first := recs[1]
	require.Equal(t, 1000, first.Count)
	require.Equal(t, "127.0.0.1", first.ClientAddress)
	require.True(t, first.Time.Equal(t0), "the record's time is its minute: %s", first.Time)
	require.Equal(t, "POST /api/v1/tenants", first.Method+" "+first.Path)
	require.Equal(t, http.StatusUnauthorized, first.Code)
	require.Equal(t, "Tenant", first.Kind)
	require.Empty(t, first.Actor)
	require.Contains(t, first.Detail, "1000 refused")

	// Stopping the sampler writes the current minute: one record per address.
	stop()
	recs = storedAudit(t, audit)
	require.Len(t, recs, 4)
	got := map[string]int{}
	for _, r := range recs[2:] {
		require.True(t, r.Time.Equal(t0.Add(time.Minute)))
		got[r.ClientAddress] = r.Count
	}
	require.Equal(t, map[string]int{"127.0.0.1": 1, "127.0.0.2": 3}, got)
}

// Issue 13, defect 5: each kind of anonymous refusal (no token, a wrong
// token, no such route, a wrong method) is sampled with what the request was
// about; a wrong token is not stored.
func TestSampledRecordsNameWhatWasRefused(t *testing.T) {
	const secret = "hunter2-TOP-SECRET"
	s, audit, _, stop := sampledStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 1))
	tests := []struct {
		name, addr, method, path string
		headers                  []string
		kind, tenant, objName    string
		code                     int
	}{
		{name: "no token", addr: "127.0.1.1", method: http.MethodPost, path: "/api/v1/tenants/acme/nodegroups",
			kind: "NodeGroup", tenant: "acme", code: http.StatusUnauthorized},
		{name: "wrong token", addr: "127.0.1.2", method: http.MethodDelete, path: "/api/v1/tenants/acme/nodegroups/workers",
			headers: []string{"Authorization", "Bearer " + secret}, kind: "NodeGroup", tenant: "acme", objName: "workers", code: http.StatusUnauthorized},
		{name: "no such route", addr: "127.0.1.3", method: http.MethodPost, path: "/api/v1/nothing-here",
			headers: []string{"Authorization", "Bearer " + testToken}, code: http.StatusNotFound},
		{name: "method not allowed", addr: "127.0.1.4", method: http.MethodPost, path: "/healthz", code: http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		require.Equal(t, tt.code, s.send(fromAddress(tt.addr), tt.method, tt.path, `{}`, tt.headers...), tt.name)
	}
	stop()
	byAddr := map[string]eventstore.AuditRecord{}
	for _, r := range storedAudit(t, audit) {
		if r.Count > 0 {
			byAddr[r.ClientAddress] = r
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := byAddr[tt.addr]
			require.True(t, ok, "no record for %s: %+v", tt.addr, byAddr)
			require.Equal(t, 1, r.Count)
			require.Equal(t, tt.method+" "+tt.path, r.Method+" "+r.Path)
			require.Equal(t, tt.code, r.Code)
			require.Equal(t, tt.kind, r.Kind)
			require.Equal(t, tt.tenant, r.Tenant)
			require.Equal(t, tt.objName, r.Name)
			require.Empty(t, r.Actor)
			require.NotContains(t, fmt.Sprintf("%+v", r), secret)
		})
	}
}

// Issue 13, defect 5: the table of sources is bounded; sources beyond it
// share one record from "other".
func TestSampledSourcesAreBounded(t *testing.T) {
	s, audit, _, stop := sampledStack(t, func(c *handlers.Config) { c.AuditSampleSources = 2 })
	for i, n := range []int{2, 1, 1, 3} {
		c := fromAddress(fmt.Sprintf("127.0.2.%d", i+1))
		for range n {
			require.Equal(t, http.StatusUnauthorized, s.send(c, http.MethodPost, "/api/v1/tenants", `{}`))
		}
	}
	stop()
	var got []string
	for _, r := range storedAudit(t, audit) {
		got = append(got, fmt.Sprintf("%s=%d", r.ClientAddress, r.Count))
	}
	sort.Strings(got)
	require.Equal(t, []string{"127.0.2.1=2", "127.0.2.2=1", "other=4"}, got)
}

// Issue 13, defect 5: a long path is stored cut to 512 bytes with a marker,
// never splitting a character, for authenticated and sampled records alike.
func TestAuditPathsAreTruncated(t *testing.T) {
	s, audit, _, stop := sampledStack(t)
	long := "/api/v1/tenants/" + strings.Repeat("é", 3000)
	require.Equal(t, http.StatusBadRequest, s.do(http.MethodDelete, long, nil).Code)
	unrouted := "/api/v1/" + strings.Repeat("x", 5000)
	require.Equal(t, http.StatusNotFound, s.send(http.DefaultClient, http.MethodPost, unrouted, `{}`))
	stop()
	recs := storedAudit(t, audit)
	require.Len(t, recs, 2)
	for i, want := range []string{long, unrouted} {
		r := recs[i]
		require.LessOrEqual(t, len(r.Path), 512, r.Path)
		require.True(t, utf8.ValidString(r.Path))
		require.True(t, strings.HasSuffix(r.Path, "…(truncated)"), r.Path)
		require.True(t, strings.HasPrefix(want, strings.TrimSuffix(r.Path, "…(truncated)")))
	}
	require.NotEmpty(t, recs[0].Actor)
	require.Equal(t, 1, recs[1].Count)
}
