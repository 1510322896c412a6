package webui

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/handlers"
)

// TestLiveStreamsCountWithWatches: issue 27, finding 7. 1,500 live dashboard
// streams of one view user were all answered while the server's memory
// grew. Live streams now take slots of the API's watch limits: one user's
// (DefaultMaxWatchesPerUser) are shared by its live pages and its API
// watches, and one more of either gets 429 until one ends.
func TestLiveStreamsCountWithWatches(t *testing.T) {
	s := newUIStack(t)
	b := s.signIn("victor", "view")
	open := func(path string) (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := b.client.Do(req)
		require.NoError(t, err)
		return resp, func() { cancel(); resp.Body.Close() }
	}
	var closers []context.CancelFunc
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for i := range handlers.DefaultMaxWatchesPerUser - 1 {
		resp, done := open("/ui/live/dashboard")
		closers = append(closers, done)
		require.Equal(t, http.StatusOK, resp.StatusCode, "stream %d", i)
	}
	// The last slot goes to an API watch of the same user (its session).
	resp, done := open("/api/v1/tenants?watch=true")
	closers = append(closers, done)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	refused, done := open("/ui/live/dashboard")
	done()
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode)
	require.NotEmpty(t, refused.Header.Get("Retry-After"))
	refused, done = open("/api/v1/tenants?watch=true")
	done()
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode)

	// Another user is not held back by victor's streams.
	other := s.signIn("olga", "view")
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, s.srv.URL+"/ui/live/dashboard", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err = other.client.Do(req.WithContext(ctx))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	cancel()
	resp.Body.Close()

	// One ends: a slot is free again.
	closers[0]()
	closers = closers[1:]
	require.Eventually(t, func() bool {
		resp, done := open("/ui/live/dashboard")
		if resp.StatusCode == http.StatusOK {
			closers = append(closers, done)
			return true
		}
		done()
		return false
	}, 10*time.Second, 50*time.Millisecond)
}
