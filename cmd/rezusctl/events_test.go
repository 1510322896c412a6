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

const eventItemJSON = `{"seq":%d,"subject":"rezus.evt.nodegroup.acme.workers","type":"%s","action":"Updated","actor":"alice","time":"2026-05-01T11:%02d:00Z",
	"object":{"kind":"NodeGroup","metadata":{"name":"workers","tenant":"acme"}}}`

func TestEvents(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.handle("GET /api/v1/events", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"kind":"EventList","metadata":{},"items":[`+eventItemJSON+`,`+eventItemJSON+`]}`, 4, "NodeGroupCreated", 1, 5, "NodeGroupScaled", 2)
	})
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	assert.Equal(t, ""+
		"SEQ   TIME                   ACTOR   TYPE               OBJECT\n"+
		"4     2026-05-01T11:01:00Z   alice   NodeGroupCreated   nodegroup/acme/workers\n"+
		"5     2026-05-01T11:02:00Z   alice   NodeGroupScaled    nodegroup/acme/workers\n",
		tc.ok("events", "--kind", "ng", "-t", "acme", "--name", "workers", "--since", "90m"))
	assert.Equal(t, "kind=NodeGroup&name=workers&since=2026-05-01T10%3A30%3A00Z&tenant=acme", f.queriesOf("GET /api/v1/events")[0], "kinds are sent by Kind; durations become times")

	out := tc.ok("events", "--since", "3", "-o", "yaml")
	assert.Equal(t, "since=3", f.queriesOf("GET /api/v1/events")[1])
	assert.Contains(t, out, "seq: 4\n")
	assert.Contains(t, out, "---\nseq: 5\n")

	r := tc.run("events", "--since", "yesterday")
	assert.Contains(t, r.stderr, `--since "yesterday": give a sequence number, an RFC 3339 time or a duration such as 10m`)
}

// --follow streams over SSE and resumes after a drop from the last id,
// without printing an event twice.
func TestEventsFollow(t *testing.T) {
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
		w.Header().Set("Content-Type", "text/event-stream")
		frame := func(seq int, typ string) string {
			item := strings.ReplaceAll(eventItemJSON, "\n\t", "") // one data line, as the server sends it
			return fmt.Sprintf("id: %d\nevent: EVENT\ndata: {\"type\":\"EVENT\",\"object\":"+item+"}\n\n", seq, seq, typ, seq)
		}
		if n == 0 {
			fmt.Fprint(w, ": following events\n\n"+frame(7, "TenantCreated")+frame(8, "TenantUpdated"))
			return
		}
		fmt.Fprint(w, frame(8, "TenantUpdated")+frame(9, "TenantDeleted")) // a server that repeats the last one
		w.(http.Flusher).Flush()
		close(resumed)
		<-r.Context().Done()
	}))
	defer srv.Close()
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	out, errOut, stop := tc.start("events", "-f", "--since", "6")
	select {
	case <-resumed:
	case <-time.After(10 * time.Second):
		t.Fatalf("no resume; stderr: %s", errOut.String())
	}
	require.Eventually(t, func() bool { return len(out.String()) > 0 && countLines(out.String()) == 4 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 0, stop())
	assert.Equal(t, ""+
		"SEQ   TIME                   ACTOR   TYPE            OBJECT\n"+
		"7     2026-05-01T11:07:00Z   alice   TenantCreated   nodegroup/acme/workers\n"+
		"8     2026-05-01T11:08:00Z   alice   TenantUpdated   nodegroup/acme/workers\n"+
		"9     2026-05-01T11:09:00Z   alice   TenantDeleted   nodegroup/acme/workers\n", out.String())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"follow=true&since=6 last=", "follow=true&since=8 last=8"}, requests)
}

func countLines(s string) int {
	n := 0
	for _, c := range s {
		if c == '\n' {
			n++
		}
	}
	return n
}

func TestAudit(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.handle("GET /api/v1/audit", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"kind":"AuditRecordList","metadata":{"continue":"2"},"items":[
			{"seq":1,"time":"2026-05-01T11:00:00Z","actor":"alice","role":"edit","method":"POST","path":"/api/v1/tenants","kind":"Tenant","name":"acme","code":201},
			{"seq":2,"time":"2026-05-01T11:01:00Z","actor":"bob","role":"view","method":"GET","path":"/api/v1/tenants/acme/kubeconfig","kind":"Kubeconfig","tenant":"acme","code":403}]}`)
	})
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	assert.Equal(t, ""+
		"TIME                   ACTOR   ROLE   METHOD   PATH                              CODE\n"+
		"2026-05-01T11:00:00Z   alice   edit   POST     /api/v1/tenants                   201\n"+
		"2026-05-01T11:01:00Z   bob     view   GET      /api/v1/tenants/acme/kubeconfig   403\n",
		tc.ok("audit", "--actor", "alice", "--kind", "tenant", "-t", "acme", "--limit", "2", "--until", "1h"))
	assert.Equal(t, "actor=alice&kind=Tenant&limit=2&tenant=acme&until=2026-05-01T11%3A00%3A00Z", f.queriesOf("GET /api/v1/audit")[0], "--limit reads one page")

	f.handle("GET /api/v1/audit", nil)
	r := tc.run("audit")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "NotFound")
}
