package main

import (
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/oidctest"
)

// TestLoginSSO: rezusctl login --sso against the real server with single
// sign-on through a real OpenID provider. The "browser" (an HTTP client
// with cookies) gets the URL rezusctl opens, signs in on the provider's
// login page and is sent back to rezusctl's loopback address; the context
// then holds a session of the provider's user, with its groups.
func TestLoginSSO(t *testing.T) {
	op := oidctest.Start(t)
	op.AddUser("u-dana", "dana", "dana-secret-pw", "platform", "sre")
	secret := filepath.Join(t.TempDir(), "client-secret")
	require.NoError(t, os.WriteFile(secret, []byte(op.ClientSecret+"\n"), 0o600))
	s := startServer(t, "--oidc-issuer", op.Issuer, "--oidc-client-id", op.ClientID, "--oidc-client-secret-file", secret)
	op.AllowRedirect(s.url + "/api/v1/auth/sso/callback")

	tc := newTestCLI(t)
	signedIn := make(chan error, 1)
	tc.openBrowser = func(u string) error {
		require.True(t, strings.HasPrefix(u, s.url+"/api/v1/auth/sso/start?"), u)
		jar, _ := cookiejar.New(nil)
		go func() {
			resp, err := op.SignIn(&http.Client{Jar: jar, Timeout: 20 * time.Second}, u, "dana", "dana-secret-pw")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.String(), "http://127.0.0.1:") {
					err = &url404{resp.Request.URL.String(), resp.Status}
				}
			}
			signedIn <- err
		}()
		return nil
	}
	out := tc.ok("login", "--sso", "--server", s.url, "--sso-timeout", "30s")
	require.NoError(t, <-signedIn)
	require.Contains(t, out, "logged in to "+s.url+" as dana (none)")
	who := tc.ok("whoami")
	require.Contains(t, who, "dana")
	require.Contains(t, who, "groups:      platform, sre")

	// The provider's user has no password here: password login as dana fails.
	tc.stdin = "dana-secret-pw\n"
	r := tc.run("login", "--server", s.url, "--username", "dana", "--password-stdin")
	require.NotEqual(t, 0, r.code)
}

type url404 struct{ url, status string }

func (e *url404) Error() string { return "the sign-in ended at " + e.url + " with " + e.status }
