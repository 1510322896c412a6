package tfprovider

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/emulator"
)

// startEmulator runs an emulator behind its HTTP API until the test ends.
func startEmulator(t *testing.T, addressing emulator.Addressing) (*emulator.Emulator, string) {
	t.Helper()
	em, err := emulator.New(emulator.Config{
		Addressing:        addressing,
		InstallDelay:      20 * time.Millisecond,
		RebootDelay:       20 * time.Millisecond,
		UpgradeDelay:      10 * time.Millisecond,
		ServiceStartDelay: 10 * time.Millisecond,
		Logf:              t.Logf,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	select {
	case <-em.Ready():
	case err := <-done:
		t.Fatalf("emulator ended: %v", err)
	}
	srv := httptest.NewServer(em.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		require.NoError(t, <-done)
	})
	return em, srv.URL
}

// TestClientAgainstEmulator runs every call against the real emulator API,
// so the client's wire types cannot drift from the emulator's.
func TestClientAgainstEmulator(t *testing.T) {
	t.Parallel()
	em, url := startEmulator(t, emulator.AddressingLoopback)
	c, err := NewClient(url+"/", em.APIToken(), 0)
	require.NoError(t, err)
	ctx := context.Background()

	a, err := c.ReserveAddress(ctx, "cp")
	require.NoError(t, err)
	require.Equal(t, "cp", a.Name)
	n, err := c.CreateNode(ctx, NodeSpec{Name: "cp-0", Cluster: "demo", Address: a.Address})
	require.NoError(t, err)
	host, port, err := n.HostPort()
	require.NoError(t, err)
	require.Equal(t, a.Address, host)
	require.Equal(t, 50000, port)
	require.Equal(t, "demo", n.Cluster)
	require.Equal(t, "maintenance", n.Phase)
	require.Equal(t, "v1.13.0", n.Version)

	got, err := c.GetNode(ctx, "cp-0")
	require.NoError(t, err)
	require.Equal(t, n, got)
	ga, err := c.GetAddress(ctx, "cp")
	require.NoError(t, err)
	require.Equal(t, "cp-0", ga.Node)

	tests := []struct {
		name       string
		call       func() error
		wantCode   int
		wantReason string
		wantMsg    string
	}{
		{"duplicate node", func() error { _, err := c.CreateNode(ctx, NodeSpec{Name: "cp-0"}); return err },
			http.StatusConflict, "AlreadyExists", `emulatednode "cp-0" already exists`},
		{"bad user data", func() error {
			_, err := c.CreateNode(ctx, NodeSpec{Name: "x", UserData: []byte("machine: [")})
			return err
		},
			http.StatusUnprocessableEntity, "Invalid", `emulatednode "x" is invalid: userData:`},
		{"address in use", func() error { _, err := c.CreateNode(ctx, NodeSpec{Name: "cp-1", Address: a.Address}); return err },
			http.StatusConflict, "Conflict", `is in use by node "cp-0"`},
		{"release in use", func() error { return c.ReleaseAddress(ctx, "cp") },
			http.StatusConflict, "Conflict", `in use by node "cp-0"`},
		{"missing node", func() error { _, err := c.GetNode(ctx, "nope"); return err },
			http.StatusNotFound, "NotFound", `emulatednode "nope" not found`},
		{"missing address", func() error { _, err := c.GetAddress(ctx, "nope"); return err },
			http.StatusNotFound, "NotFound", `emulatedaddress "nope" not found`},
		{"no token", func() error {
			anon, err := NewClient(url, "", 0)
			require.NoError(t, err)
			_, err = anon.GetNode(ctx, "cp-0")
			return err
		}, http.StatusUnauthorized, "Unauthorized", "needs its bearer token"},
		{"wrong token", func() error {
			wrong, err := NewClient(url, "not-"+em.APIToken(), 0)
			require.NoError(t, err)
			return wrong.DeleteNode(ctx, "cp-0")
		}, http.StatusUnauthorized, "Unauthorized", "needs its bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var apiErr *APIError
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, tt.wantCode, apiErr.Code)
			require.Equal(t, tt.wantReason, apiErr.Reason)
			require.Contains(t, err.Error(), tt.wantMsg)
			require.Equal(t, tt.wantCode == http.StatusNotFound, IsNotFound(err))
		})
	}

	require.NoError(t, c.DeleteNode(ctx, "cp-0"))
	require.True(t, IsNotFound(c.DeleteNode(ctx, "cp-0")))
	require.NoError(t, c.ReleaseAddress(ctx, "cp"))
	require.True(t, IsNotFound(c.ReleaseAddress(ctx, "cp")))
	require.Empty(t, em.List())
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler http.HandlerFunc
		timeout time.Duration
		want    string
	}{
		{"not a status", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "upstream connect error", http.StatusBadGateway)
		}, 0, "the emulator answered: upstream connect error (HTTP 502)"},
		{"empty body", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}, 0, "the emulator answered: Service Unavailable (HTTP 503)"},
		{"bad json", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("{")) //nolint:errcheck // a test server.
		}, 0, "decoding the answer"},
		{"hangs", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}, 50 * time.Millisecond, "Client.Timeout exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tt.handler)
			t.Cleanup(srv.Close)
			c, err := NewClient(srv.URL, "", tt.timeout)
			require.NoError(t, err)
			_, err = c.GetNode(context.Background(), "n")
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestNewClientRefusesBadEndpoints(t *testing.T) {
	t.Parallel()
	for _, endpoint := range []string{"", "127.0.0.1:8080", "ftp://host", "http://", "http://[::1"} {
		_, err := NewClient(endpoint, "", 0)
		require.Error(t, err, endpoint)
		require.True(t, strings.Contains(err.Error(), "endpoint"), err.Error())
	}
}
