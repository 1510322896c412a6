package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadSSE(t *testing.T) {
	in := ": watching tenants\n\n" +
		"id: 5\nevent: ADDED\ndata: {\"a\":1}\n\n" +
		": heartbeat\n\n" +
		"event: BOOKMARK\r\ndata: {}\r\n\r\n" + // CRLF lines too; the id carries over
		"id: 7\nevent: MODIFIED\ndata: line1\ndata: line2\n\n" +
		"id: 8\ndata: last, without a final blank line"
	var got []sseEvent
	err := readSSE(strings.NewReader(in), func(ev sseEvent) error {
		got = append(got, ev)
		return nil
	})
	require.EqualError(t, err, "EOF")
	assert.Equal(t, []sseEvent{
		{ID: "5", Event: "ADDED", Data: []byte(`{"a":1}`)},
		{ID: "5", Event: "BOOKMARK", Data: []byte(`{}`)},
		{ID: "7", Event: "MODIFIED", Data: []byte("line1\nline2")},
	}, got, "an event is dispatched at its blank line only")
}

func sseFrame(id int, typ, object string) string {
	return fmt.Sprintf("id: %d\nevent: %s\ndata: {\"type\":%q,\"object\":%s}\n\n", id, typ, typ, object)
}

func ngJSON(name string, count int) string {
	return fmt.Sprintf(`{"apiVersion":"rezuscloud.io/v1","kind":"NodeGroup","metadata":{"name":%q,"tenant":"acme","resourceVersion":"1","creationTimestamp":"2026-05-01T11:00:00Z"},"spec":{"role":"worker","count":%d,"provider":"emu"}}`, name, count)
}

// A watch whose connection drops resumes from the last event id it saw, with
// resourceVersion and Last-Event-ID, and prints nothing twice.
func TestGetWatchResumesAfterDrop(t *testing.T) {
	var (
		mu       sync.Mutex
		requests []string
	)
	resumed := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(requests)
		requests = append(requests, r.URL.RawQuery+" last="+r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprintf(w, `{"kind":"NodeGroupList","metadata":{"resourceVersion":"10"},"items":[%s]}`, ngJSON("a", 1))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		switch n {
		case 1: // the first watch: two changes, then the connection drops
			fmt.Fprint(w, ": watching\n\n"+sseFrame(11, "MODIFIED", ngJSON("a", 2))+sseFrame(12, "ADDED", ngJSON("b", 1)))
			w.(http.Flusher).Flush()
			hj, _, _ := w.(http.Hijacker).Hijack()
			hj.Close()
		case 2: // the server ends the stream cleanly (shutdown): resume again
			fmt.Fprint(w, sseFrame(13, "DELETED", ngJSON("a", 2)))
		default:
			fmt.Fprint(w, "event: BOOKMARK\nid: 14\ndata: {\"type\":\"BOOKMARK\",\"object\":{}}\n\n")
			w.(http.Flusher).Flush()
			if n == 3 {
				close(resumed)
			}
			<-r.Context().Done()
		}
	}))
	defer srv.Close()

	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	out, _, stop := tc.start("get", "ng", "-w", "--output-watch-events")
	select {
	case <-resumed:
	case <-t.Context().Done():
	}
	assert.Equal(t, 0, stop(), "ending a watch (Ctrl-C) is not an error")
	assert.Equal(t, ""+
		"EVENT      NAME   ROLE     COUNT   MIN   MAX   TARGET   PROVIDER   AGE\n"+
		"ADDED      a      worker   1       -     -     1        emu        60m\n"+
		"MODIFIED   a      worker   2       -     -     2        emu        60m\n"+
		"ADDED      b      worker   1       -     -     1        emu        60m\n"+
		"DELETED    a      worker   2       -     -     2        emu        60m\n", out.String())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{
		"limit=500 last=",
		"resourceVersion=10&watch=true last=10",
		"resourceVersion=12&watch=true last=12",
		"resourceVersion=13&watch=true last=13",
	}, requests)
}

// An ERROR event (410 Gone: the version is too old) ends the watch with the Status.
func TestGetWatchError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprint(w, `{"metadata":{"resourceVersion":"10"},"items":[]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: ERROR\ndata: {\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"status\":\"Failure\",\"code\":410,\"reason\":\"Gone\",\"message\":\"too old resource version: 10\"}}\n\n")
	}))
	defer srv.Close()
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	r := tc.run("get", "tenants", "-w")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "Error from server (Gone): too old resource version: 10\n", r.stderr)
}

// A server that stays unreachable fails the watch after WatchGiveUp.
func TestWatchGivesUp(t *testing.T) {
	var mu sync.Mutex
	attempts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprint(w, `{"metadata":{"resourceVersion":"10"},"items":[]}`)
			return
		}
		mu.Lock()
		attempts++
		mu.Unlock()
		hj, _, _ := w.(http.Hijacker).Hijack() // the connection drops before any answer
		hj.Close()
	}))
	defer srv.Close()
	tc := newTestCLI(t)
	tc.giveUp = 100 * time.Millisecond
	tc.loginTo(srv.URL)
	r := tc.run("get", "tenants", "-w")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "error: cannot reach the server at "+srv.URL+": the connection was closed\n", r.stderr)
	mu.Lock()
	defer mu.Unlock()
	assert.Greater(t, attempts, 2, "it retried first")
}
