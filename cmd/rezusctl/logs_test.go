package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLogs(t *testing.T) {
	f, srv := newFakeAPI(t)
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	f.put("/api/v1/tenants/acme/applies/apply-2", obj("Apply", "acme", "apply-2", t0.Add(time.Minute), `{"operation":"apply","trigger":"change","generation":1}`, `{"phase":"Applying"}`, nil))
	f.put("/api/v1/tenants/acme/applies/apply-1", obj("Apply", "acme", "apply-1", t0, `{"operation":"apply","trigger":"change","generation":1}`, `{"phase":"Succeeded"}`, nil))
	for _, name := range []string{"apply-1", "apply-2"} {
		f.handle("GET /api/v1/tenants/acme/applies/"+name+"/log", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("log of " + name + "\n"))
		})
	}
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	assert.Equal(t, "log of apply-2\n", tc.ok("logs", "-t", "acme", "-f"), "the newest apply by default")
	assert.Equal(t, []string{"follow=true"}, f.queriesOf("GET /api/v1/tenants/acme/applies/apply-2/log"))
	assert.Equal(t, "log of apply-1\n", tc.ok("logs", "-t", "acme", "apply-1"))
	assert.Equal(t, []string{""}, f.queriesOf("GET /api/v1/tenants/acme/applies/apply-1/log"))

	r := tc.run("logs", "-t", "acme", "apply-9")
	assert.Equal(t, 1, r.code)
	r = tc.run("logs", "-t", "empty")
	assert.Equal(t, 1, r.code)
}
