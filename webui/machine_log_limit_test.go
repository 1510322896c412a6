package webui

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// TestMachineLogStreamsTakeASlot: issue 42, finding 7. A machine's live log
// stream stayed open after its follow was refused (a notice, then heartbeats
// for ever) and took no slot of the watch limits: 1,500 of them from one
// user were all answered, each holding a goroutine and its buffers. Now the
// stream holds its follow's slot for its whole life, so one user's
// (DefaultMaxWatchesPerUser) are shared with its other streams and one more
// gets 429 with Retry-After; and a refused or ended follow ends the stream
// with a last "ended" event that says why.
func TestMachineLogStreamsTakeASlot(t *testing.T) {
	s := newUIStack(t, withMachineLogs(&fakeMachineLogs{}))
	s.acmeMachine()
	b := s.signIn("victor", domain.RoleView)
	open := func(path string) (*http.Response, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := b.client.Do(req)
		require.NoError(t, err)
		return resp, func() { cancel(); resp.Body.Close() }
	}
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	const logs = "/ui/live/tenants/acme/machines/m1/logs?service=apid"
	for i := range handlers.DefaultMaxWatchesPerUser {
		resp, done := open(logs)
		closers = append(closers, done)
		require.Equal(t, http.StatusOK, resp.StatusCode, "stream %d", i)
	}
	for _, path := range []string{logs, "/ui/live/tenants/acme/machines/m1/logs?service=kernel", "/ui/live/dashboard"} {
		refused, done := open(path)
		done()
		require.Equal(t, http.StatusTooManyRequests, refused.StatusCode, path)
		require.NotEmpty(t, refused.Header.Get("Retry-After"), path)
	}

	// One ends: its slot is free again.
	closers[0]()
	closers = closers[1:]
	require.Eventually(t, func() bool {
		resp, done := open(logs)
		if resp.StatusCode == http.StatusOK {
			closers = append(closers, done)
			return true
		}
		done()
		return false
	}, 10*time.Second, 50*time.Millisecond)
	for _, c := range closers {
		c()
	}
	closers = nil

	// A follow the node refuses, or one that ends, ends the stream with the
	// reason: it does not stay open, holding nothing.
	for _, tc := range []struct{ service, reason string }{
		{"etcd", "no etcd log"},
		{"udevd", "log ended"},
	} {
		resp, done := open("/ui/live/tenants/acme/machines/m1/logs?service=" + tc.service)
		require.Equal(t, http.StatusOK, resp.StatusCode, tc.service)
		event, data := lastEvent(t, resp.Body, 10*time.Second)
		done()
		require.Equal(t, liveEndEvent, event, tc.service)
		require.Contains(t, data, tc.reason, tc.service)
	}
}

// lastEvent reads an event stream to its end (failing after within) and
// returns its last event.
func lastEvent(t *testing.T, body io.ReadCloser, within time.Duration) (event, data string) {
	t.Helper()
	timer := time.AfterFunc(within, func() { body.Close() })
	defer timer.Stop()
	sc := bufio.NewScanner(body)
	var cur, text string
	ended := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur, text = strings.TrimPrefix(line, "event: "), ""
		case strings.HasPrefix(line, "data: "):
			text += strings.TrimPrefix(line, "data: ") + "\n"
		case line == "" && cur != "":
			event, data, cur = cur, text, ""
		}
	}
	ended = sc.Err() == nil
	require.True(t, ended, "the stream did not end within %s (last event %q: %s)", within, event, data)
	return event, data
}
