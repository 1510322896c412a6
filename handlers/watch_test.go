package handlers_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// TestWatchResumeSeesEveryEventOnce disconnects a watcher, writes while it is
// away, and resumes from its last id: the ids seen across both sessions are
// exactly the versions the writes returned, in order.
func TestWatchResumeSeesEveryEventOnce(t *testing.T) {
	s := newStack(t).withProvider()
	ten := s.mustCreate("/api/v1/tenants", tenantBody("w", nil))
	var want []string
	write := func(method, path string, body any) {
		t.Helper()
		r := s.do(method, path, body)
		require.Less(t, r.Code, 300, string(r.Body))
		want = append(want, r.object(t).Metadata.ResourceVersion)
	}
	w := s.watch("/api/v1/tenants/w/nodegroups?watch=true&resourceVersion=" + ten.Metadata.ResourceVersion)
	for i := range 5 {
		write(http.MethodPost, "/api/v1/tenants/w/nodegroups", nodeGroupBody(fmt.Sprintf("g%d", i), 1))
	}
	var got []string
	var types []string
	for range 5 {
		ev := w.next(t)
		got = append(got, ev.ID)
		types = append(types, ev.Event)
		require.Equal(t, ev.ID, ev.object(t).Metadata.ResourceVersion)
	}
	w.close()

	// While disconnected: updates, a delete, creates, and noise in another tenant.
	s.mustCreate("/api/v1/tenants", tenantBody("other", nil))
	s.mustCreate("/api/v1/tenants/other/nodegroups", nodeGroupBody("g0", 1))
	write(http.MethodPatch, "/api/v1/tenants/w/nodegroups/g1", `{"spec":{"count":3}}`)
	write(http.MethodDelete, "/api/v1/tenants/w/nodegroups/g2", nil)
	write(http.MethodPost, "/api/v1/tenants/w/nodegroups", nodeGroupBody("g5", 1))

	w2 := s.watch("/api/v1/tenants/w/nodegroups?watch=true", "Last-Event-ID", got[len(got)-1])
	for range 3 {
		ev := w2.next(t)
		got = append(got, ev.ID)
		types = append(types, ev.Event)
	}
	// And live events after the resume.
	write(http.MethodPatch, "/api/v1/tenants/w/nodegroups/g0", `{"metadata":{"labels":{"a":"b"}}}`)
	ev := w2.next(t)
	got = append(got, ev.ID)
	types = append(types, ev.Event)

	require.Equal(t, want, got)
	require.Equal(t, []string{"ADDED", "ADDED", "ADDED", "ADDED", "ADDED", "MODIFIED", "DELETED", "ADDED", "MODIFIED"}, types)
	select {
	case extra := <-w2.events:
		if extra.Event != "BOOKMARK" {
			t.Fatalf("unexpected extra event %+v", extra)
		}
	case <-time.After(200 * time.Millisecond):
	}
}

func TestWatchFromZeroSendsCurrentStateFirst(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("a", map[string]string{"env": "prod"}))
	s.mustCreate("/api/v1/tenants", tenantBody("b", map[string]string{"env": "dev"}))
	w := s.watch("/api/v1/tenants?watch=true&labelSelector=env%3Dprod")
	first := w.next(t)
	require.Equal(t, "ADDED", first.Event)
	require.Equal(t, "a", first.object(t).Metadata.Name)

	// b starts matching: ADDED; a stops matching: DELETED for this watcher.
	s.do(http.MethodPatch, "/api/v1/tenants/b", `{"metadata":{"labels":{"env":"prod"}}}`)
	ev := w.next(t)
	require.Equal(t, "ADDED", ev.Event)
	require.Equal(t, "b", ev.object(t).Metadata.Name)
	s.do(http.MethodPatch, "/api/v1/tenants/a", `{"metadata":{"labels":{"env":"dev"}}}`)
	ev = w.next(t)
	require.Equal(t, "DELETED", ev.Event)
	require.Equal(t, "a", ev.object(t).Metadata.Name)
	// Changes to objects that never matched are not sent.
	s.mustCreate("/api/v1/tenants", tenantBody("c", map[string]string{"env": "dev"}))
	s.do(http.MethodPatch, "/api/v1/tenants/b", `{"spec":{"talosVersion":"v1.13.1"}}`)
	ev = w.next(t)
	require.Equal(t, "MODIFIED", ev.Event)
	require.Equal(t, "b", ev.object(t).Metadata.Name)
}

func TestWatchTooOldVersionIsGone(t *testing.T) {
	s := newStack(t)
	for i := range 5 {
		s.mustCreate("/api/v1/tenants", tenantBody(fmt.Sprintf("t%d", i), nil))
	}
	ctx := context.Background()
	stream, err := s.env.Store.JetStream().Stream(ctx, eventstore.StreamName)
	require.NoError(t, err)
	require.NoError(t, stream.Purge(ctx, jetstream.WithPurgeSequence(4)))

	w := s.watch("/api/v1/tenants?watch=true&resourceVersion=1")
	ev := w.next(t)
	require.Equal(t, "ERROR", ev.Event)
	require.Contains(t, ev.Data, `"code":410`)
	require.Contains(t, ev.Data, `"reason":"Gone"`)

	// A version still in the stream resumes fine.
	w2 := s.watch("/api/v1/tenants?watch=true&resourceVersion=3")
	ev = w2.next(t)
	require.Equal(t, "4", ev.ID)
}

func TestWatchBookmarksAndHeartbeats(t *testing.T) {
	s := newStack(t, func(c *handlers.Config) {
		c.BookmarkInterval = 30 * time.Millisecond
		c.HeartbeatInterval = 20 * time.Millisecond
	})
	ten := s.mustCreate("/api/v1/tenants", tenantBody("bm", nil))
	w := s.watch("/api/v1/tenants?watch=true&resourceVersion=" + ten.Metadata.ResourceVersion)
	s.mustCreate("/api/v1/tenants", tenantBody("bm2", nil))
	var bookmark sseEvent
	deadline := time.After(10 * time.Second)
	for bookmark.Event == "" {
		select {
		case ev := <-w.events:
			if ev.Event == "BOOKMARK" && ev.ID != ten.Metadata.ResourceVersion {
				bookmark = ev
			}
		case <-deadline:
			t.Fatal("no bookmark")
		}
	}
	obj := bookmark.object(t)
	require.Equal(t, bookmark.ID, obj.Metadata.ResourceVersion)
	n, _ := strconv.Atoi(obj.Metadata.ResourceVersion)
	require.Greater(t, n, 1)
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.comments >= 3
	}, 10*time.Second, 5*time.Millisecond)
}

// TestSlowWatcherBlocksNobody opens a watch that never reads, then writes
// enough to fill its socket buffers: writes still complete and a second watcher
// sees every event.
func TestSlowWatcherBlocksNobody(t *testing.T) {
	s := newStack(t, func(c *handlers.Config) { c.WatchWriteTimeout = time.Second }).withProvider()
	ten := s.mustCreate("/api/v1/tenants", tenantBody("slow", nil))

	conn, err := net.Dial("tcp", strings.TrimPrefix(s.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET /api/v1/tenants/slow/nodegroups?watch=true&resourceVersion=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
		ten.Metadata.ResourceVersion, testToken)
	require.NoError(t, err)

	fast := s.watch("/api/v1/tenants/slow/nodegroups?watch=true&resourceVersion=" + ten.Metadata.ResourceVersion)
	pad := strings.Repeat("x", 16<<10)
	const n = 200
	for i := range n {
		body := nodeGroupBody(fmt.Sprintf("g%d", i), 1)
		body["metadata"].(map[string]any)["annotations"] = map[string]string{"pad": pad}
		r := s.do(http.MethodPost, "/api/v1/tenants/slow/nodegroups", body)
		require.Equal(t, http.StatusCreated, r.Code)
	}
	for i := range n {
		ev := fast.next(t)
		require.Equal(t, "ADDED", ev.Event)
		require.Equal(t, fmt.Sprintf("g%d", i), ev.object(t).Metadata.Name)
	}
}

func TestWatchesEndOnShutdown(t *testing.T) {
	s := newStack(t)
	w := s.watch("/api/v1/tenants?watch=true")
	s.api.StopWatches()
	select {
	case _, ok := <-w.events:
		for ok {
			_, ok = <-w.events
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end on shutdown")
	}
}

// TestListPagesStayCorrectUnderChange pages through a list while objects are
// created and deleted between pages: every object that existed throughout is
// seen exactly once.
func TestListPagesStayCorrectUnderChange(t *testing.T) {
	s := newStack(t)
	const n = 60
	for i := range n {
		s.mustCreate("/api/v1/tenants", tenantBody(fmt.Sprintf("t%03d", i), map[string]string{"page": "yes"}))
	}
	seen := map[string]int{}
	cont := ""
	page := 0
	for {
		url := "/api/v1/tenants?limit=7&labelSelector=page"
		if cont != "" {
			url += "&continue=" + cont
		}
		r := s.do(http.MethodGet, url, nil)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		var list domain.List
		require.NoError(t, jsonUnmarshal(r.Body, &list))
		require.LessOrEqual(t, len(list.Items), 7)
		for _, it := range list.Items {
			seen[it.Metadata.Name]++
		}
		// Churn between pages: delete an object already served and one not yet
		// served, create objects before and after the cursor.
		page++
		s.do(http.MethodDelete, fmt.Sprintf("/api/v1/tenants/t%03d", (page*7-3)%n), nil)
		s.do(http.MethodDelete, fmt.Sprintf("/api/v1/tenants/t%03d", 50+page%10), nil)
		s.mustCreate("/api/v1/tenants", tenantBody(fmt.Sprintf("a%03d", page), map[string]string{"page": "yes"}))
		s.mustCreate("/api/v1/tenants", tenantBody(fmt.Sprintf("z%03d", page), map[string]string{"page": "yes"}))
		cont = list.Metadata.Continue
		if cont == "" {
			break
		}
	}
	for name, c := range seen {
		require.Equal(t, 1, c, "%s seen %d times", name, c)
	}
	// Every original object below t050 that was never deleted must have been seen.
	for i := range 50 {
		name := fmt.Sprintf("t%03d", i)
		if s.do(http.MethodGet, "/api/v1/tenants/"+name, nil).Code == http.StatusOK {
			require.Contains(t, seen, name)
		}
	}
	require.Greater(t, page, 8)
}

func TestWatchLimit(t *testing.T) {
	s := newStack(t, func(c *handlers.Config) { c.MaxWatches = 2 })
	s.watch("/api/v1/tenants?watch=true")
	s.watch("/api/v1/providers?watch=true")
	r := s.do(http.MethodGet, "/api/v1/tenants?watch=true", nil)
	require.Equal(t, http.StatusTooManyRequests, r.Code)
	require.Equal(t, domain.ReasonTooManyRequests, r.status(t).Reason)
	require.Equal(t, "5", r.Header.Get("Retry-After"))
}

// A list larger than the write buffer is streamed and is the same document a
// small one is: every item, in key order, as JSON.
func TestLargeListIsStreamedWhole(t *testing.T) {
	s := newStack(t)
	labels := map[string]string{}
	for i := range 24 {
		labels[fmt.Sprintf("team.example.com/label-%02d-%s", i, strings.Repeat("k", 30))] = strings.Repeat("v", 63)
	}
	const n = 40
	for i := range n {
		s.mustCreate("/api/v1/tenants", tenantBody(fmt.Sprintf("big%03d", i), labels))
	}
	r := s.do(http.MethodGet, "/api/v1/tenants", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Greater(t, len(r.Body), 64<<10, "the list must exceed the buffer for this test to mean anything")
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	var list domain.List
	require.NoError(t, jsonUnmarshal(r.Body, &list))
	require.Equal(t, "TenantList", list.Kind)
	require.NotEmpty(t, list.Metadata.ResourceVersion)
	require.Len(t, list.Items, n)
	for i, it := range list.Items {
		require.Equal(t, fmt.Sprintf("big%03d", i), it.Metadata.Name)
		require.Equal(t, labels, it.Metadata.Labels)
	}

	small := s.do(http.MethodGet, "/api/v1/tenants?limit=2", nil)
	require.Equal(t, http.StatusOK, small.Code)
	require.NoError(t, jsonUnmarshal(small.Body, &list))
	require.Len(t, list.Items, 2)
	require.NotEmpty(t, list.Metadata.Continue)
	require.EqualValues(t, n-2, *list.Metadata.RemainingItemCount)
}
