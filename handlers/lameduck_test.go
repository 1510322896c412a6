package handlers_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLameDuck: a replica going away answers /readyz 503 saying why, still
// serves every request, and ends each watch with a BOOKMARK whose id is the
// version the watch reached, so a client resuming from it on another
// replica misses nothing and gets nothing twice.
func TestLameDuck(t *testing.T) {
	s := newStack(t).withProvider()
	require.Eventually(t, func() bool { return s.do(http.MethodGet, "/readyz", nil, "Authorization", "").Code == http.StatusOK }, 10*time.Second, 5*time.Millisecond)
	ten := s.mustCreate("/api/v1/tenants", tenantBody("w", nil))
	w := s.watch("/api/v1/tenants/w/nodegroups?watch=true&resourceVersion=" + ten.Metadata.ResourceVersion)
	g := s.mustCreate("/api/v1/tenants/w/nodegroups", nodeGroupBody("g0", 1))
	require.Equal(t, g.Metadata.ResourceVersion, w.next(t).ID)

	s.api.LameDuck()
	r := s.do(http.MethodGet, "/readyz", nil, "Authorization", "")
	require.Equal(t, http.StatusServiceUnavailable, r.Code)
	require.Contains(t, r.status(t).Message, "lame duck")
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/w", nil).Code, "still serving")

	s.api.StopWatches()
	var last sseEvent
	for ev := range w.events {
		last = ev
	}
	require.Equal(t, "BOOKMARK", last.Event, "the watch's last frame")
	require.Equal(t, g.Metadata.ResourceVersion, last.ID)
	require.True(t, strings.Contains(last.Data, `"resourceVersion":"`+g.Metadata.ResourceVersion+`"`), last.Data)
}

// TestAWatchAStoppingReplicaCutShortIsRetried: a watch whose setup a lame
// duck's StopWatches cuts short is a 503 with Retry-After, which a client
// retries on another replica, not an ERROR event of a watch that began (a
// rolling upgrade's watcher got "internal error: creating ordered consumer:
// context canceled").
func TestAWatchAStoppingReplicaCutShortIsRetried(t *testing.T) {
	s := newStack(t).withProvider()
	ten := s.mustCreate("/api/v1/tenants", tenantBody("w", nil))
	s.api.LameDuck()
	s.api.StopWatches()
	r := s.do(http.MethodGet, "/api/v1/tenants/w/nodegroups?watch=true&resourceVersion="+ten.Metadata.ResourceVersion, nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Code, string(r.Body))
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Contains(t, r.status(t).Message, "shutting down")
}
