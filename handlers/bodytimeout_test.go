package handlers_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/handlers"
)

// TestBodyReadTimeout checks that a client that sends a request's headers and
// then stalls its body gets an answer (400) once the body read timeout has
// passed, instead of holding the connection and the handler for ever, and
// that a request sending its body in time is not affected.
func TestBodyReadTimeout(t *testing.T) {
	s := newStack(t)
	const timeout = 300 * time.Millisecond
	srv := httptest.NewServer(handlers.BodyReadTimeout(s.api.Handler(), timeout))
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	_, err = fmt.Fprintf(conn, "POST /api/v1/tenants HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"metadata\":", srv.Listener.Addr(), testToken)
	require.NoError(t, err)
	// The client's own bound: far beyond the server's, short of the test's.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the server answers a stalled body")
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.GreaterOrEqual(t, time.Since(start), timeout)

	// A body sent in time goes through, and the answer is not cut off.
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/tenants", strings.NewReader(`{"metadata":{"name":"acme"}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	ok, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	ok.Body.Close()
	require.Equal(t, http.StatusCreated, ok.StatusCode)
}
