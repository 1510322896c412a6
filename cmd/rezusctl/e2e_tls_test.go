package main

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEndToEndTLS logs in to a server serving its self-signed certificate,
// trusting it with --certificate-authority, and is refused without it.
func TestEndToEndTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	bin := buildServer(t)
	dir := t.TempDir()
	log := &syncBuffer{}
	exited := runServer(t, bin, log, "serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--tls-self-signed", "--log-level", "info")

	ca := filepath.Join(dir, "tls", "tls.crt")
	url := "https://" + listening(t, log, exited)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("the server exited: %v\n%s", err, log.String())
		default:
		}
		if pem, err := os.ReadFile(ca); err == nil {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			if resp, err := c.Get(url + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
		}
		require.True(t, time.Now().Before(deadline), "the server did not become ready:\n%s", log.String())
		time.Sleep(50 * time.Millisecond) // polling a child process; there is nothing to wait on
	}

	tc := newTestCLI(t)
	tc.stdin = e2eAdminPassword + "\n"
	r := tc.run("login", "--server", url, "--password-stdin")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "certificate")

	tc.stdin = e2eAdminPassword + "\n"
	tc.ok("login", "--server", url, "--certificate-authority", ca, "--password-stdin")
	assert.Contains(t, tc.ok("whoami"), "admin")
	tc.ok("create", "-f", writeTemp(t, `{"apiVersion":"rezuscloud.io/v1","kind":"Tenant","metadata":{"name":"over-tls"},"spec":{}}`))
	assert.Contains(t, tc.ok("get", "tenants"), "over-tls")
}

func writeTemp(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "doc.json")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}
