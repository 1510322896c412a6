package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
)

// restartIdentity is a restart of the server on the same data: a new
// identity service (its config adjusted by idm) and API over the same
// store, sessions and secrets.
func (s *stack) restartIdentity(idm func(*identity.Config)) {
	s.t.Helper()
	s.srv.Close()
	s.api.StopWatches()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := identity.Config{StaticToken: testToken, Now: s.clock.Now, PasswordCost: bcrypt.MinCost}
	if idm != nil {
		idm(&cfg)
	}
	id, err := identity.NewService(ctx, cfg, s.env.Store, s.cache)
	require.NoError(s.t, err)
	s.identity = id
	s.api = handlers.New(handlers.Config{}, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector, Identity: id})
	s.srv = httptest.NewServer(s.api.Handler())
}

// TestPasswordSessionsEndWithPasswordLogin (issue 42, finding 9): a session
// made by a password login is refused once the server runs with
// --password-login=false, and stays ended when password login comes back;
// a session of single sign-on goes on.
func TestPasswordSessionsEndWithPasswordLogin(t *testing.T) {
	s, op := ssoStack(t)
	s.createUser("carol", domain.RoleView, alicePassword)
	password := s.sessionToken("carol", alicePassword)
	require.Equal(t, "carol", whoami(t, s, password)["user"])
	b := newBrowser(t, op, toUI)
	b.signIn(t, s.srv.URL+"/api/v1/auth/sso/start", "bob", "bob-secret-pw").Body.Close()
	sso := b.cookie(s.srv.URL, identity.SessionCookie)
	require.Equal(t, "bob", whoami(t, s, sso)["user"])

	restartSSO := func(passwordLogin bool) {
		s.restartIdentity(func(c *identity.Config) { c.DisablePasswordLogin = !passwordLogin })
		callback := s.srv.URL + "/api/v1/auth/sso/callback"
		op.AllowRedirect(callback)
		require.NoError(t, s.identity.EnableSSO(identity.OIDCConfig{Issuer: op.Issuer, ClientID: op.ClientID,
			ClientSecret: op.ClientSecret, RedirectURL: callback}))
	}
	restartSSO(false)
	r := s.do(http.MethodGet, "/api/v1/auth/whoami", nil, "Cookie", identity.SessionCookie+"="+password, "Authorization", "")
	require.Equal(t, http.StatusUnauthorized, r.Code, "the password session is refused: %s", r.Body)
	require.Contains(t, string(r.Body), "password login is disabled")
	r = s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(password)...)
	require.Equal(t, http.StatusUnauthorized, r.Code, "and stays refused: %s", r.Body)
	require.Equal(t, "bob", whoami(t, s, sso)["user"], "the single sign-on session goes on")
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants", nil).Code, "the static token still works")

	restartSSO(true)
	r = s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(password)...)
	require.Equal(t, http.StatusUnauthorized, r.Code, "the session stays ended: %s", r.Body)
	require.Equal(t, "carol", whoami(t, s, s.sessionToken("carol", alicePassword))["user"])
}
