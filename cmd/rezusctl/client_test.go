package main

import (
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestErrorOutput(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		stderr  string
	}{
		{"status with causes", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, domain.NewInvalid("NodeGroup", "cp", []domain.Cause{
				{Field: "spec.count", Message: "a control-plane group needs an odd count of at least 1 for etcd quorum, got 2"},
				{Field: "spec.provider", Message: "the name of a Provider is required"},
				{Message: "a cause without a field"},
			}))
		}, "Error from server (Invalid): nodegroup \"cp\" is invalid: spec.count: a control-plane group needs an odd count of at least 1 for etcd quorum, got 2; spec.provider: the name of a Provider is required; a cause without a field\n" +
			"  spec.count: a control-plane group needs an odd count of at least 1 for etcd quorum, got 2\n" +
			"  spec.provider: the name of a Provider is required\n" +
			"  a cause without a field\n"},
		{"not found", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, domain.NewNotFound("Tenant", "acme"))
		}, "Error from server (NotFound): tenant \"acme\" not found\n"},
		{"unauthorized gets a hint", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, domain.NewUnauthorized("the bearer token is not valid"))
		}, "Error from server (Unauthorized): the bearer token is not valid\n(log in with `rezusctl login`, or give a token with --token)\n"},
		{"not a Status", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "upstream connect error", http.StatusBadGateway)
		}, "Error from server (InternalError): the server answered 502 Bad Gateway: upstream connect error\n"},
		{"empty body", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}, "Error from server (ServiceUnavailable): the server answered 503 Service Unavailable: Service Unavailable\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			tc := newTestCLI(t)
			r := tc.run("--server", srv.URL, "get", "tenant", "acme")
			assert.Equal(t, 1, r.code)
			assert.Equal(t, tt.stderr, r.stderr)
			assert.Empty(t, r.stdout)
		})
	}
}

func TestNetworkErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now

	tc := newTestCLI(t)
	r := tc.run("--server", "http://"+addr, "get", "tenants")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "error: cannot reach the server at http://"+addr+": connection refused\n", r.stderr)

	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	r = tc.run("--server", "https://"+plain.Listener.Addr().String(), "get", "tenants")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "the server does not speak TLS; use an http:// URL\n")

	r = tc.run("--server", "ftp://x", "get", "tenants")
	assert.Equal(t, "error: server \"ftp://x\" must be an http:// or https:// URL with a host\n", r.stderr)
}

func TestTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"version":"v9","goVersion":"go1.26","apiVersion":"rezuscloud.io/v1"}`))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	notPEM := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("nope"), 0o600))

	tc := newTestCLI(t)
	r := tc.run("--server", srv.URL, "version")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "certificate is signed by an unknown authority (trust it with --certificate-authority FILE")

	assert.Contains(t, tc.ok("--server", srv.URL, "--certificate-authority", ca, "version"), "Server Version: v9 (go1.26, API rezuscloud.io/v1)\n")
	assert.Contains(t, tc.ok("--server", srv.URL, "--insecure-skip-tls-verify", "version"), "Server Version: v9")

	// From the context, too.
	tc.ok("config", "set-context", "tls", "--server", srv.URL, "--certificate-authority", ca)
	assert.Contains(t, tc.ok("version"), "Server Version: v9")

	r = tc.run("--server", srv.URL, "--certificate-authority", notPEM, "version")
	assert.Contains(t, r.stderr, "holds no PEM certificate")
	r = tc.run("--server", srv.URL, "--certificate-authority", filepath.Join(dir, "missing.pem"), "version")
	assert.Contains(t, r.stderr, "reading certificate authority")
}

func TestUsageErrors(t *testing.T) {
	tc := newTestCLI(t)
	r := tc.run("get", "tenants", "--bogus")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "flag provided but not defined: -bogus (see rezusctl get --help)")
	r = tc.run("get")
	assert.Equal(t, 1, r.code)
	r = tc.run("--server", "http://127.0.0.1:1", "get")
	assert.Contains(t, r.stderr, "give KIND [NAME]")
}
