package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/identity"
)

// TestSSOUserRemovedAtProviderLosesTokens (issue 42, finding 8): a single
// sign-on user makes an API token for CI and logs out; removed at the
// provider, the token asks the provider when the refresh interval has
// passed and is refused from then on (it worked for good before). Signed
// in again as the same account, the user's tokens work again.
func TestSSOUserRemovedAtProviderLosesTokens(t *testing.T) {
	s, op := ssoStack(t)
	start := time.Now()
	s.clock.Set(start)
	b := newBrowser(t, op, toUI)
	b.signIn(t, s.srv.URL+"/api/v1/auth/sso/start", "alice", "alice-secret-pw").Body.Close()
	session := b.cookie(s.srv.URL, identity.SessionCookie)
	ci, _ := s.createToken(`{"metadata":{},"spec":{"description":"ci"}}`, bearer(session)...)
	require.Equal(t, "alice", whoami(t, s, ci)["user"])
	r := s.do(http.MethodPost, "/api/v1/auth/logout", nil, bearer(session)...)
	require.Equal(t, http.StatusNoContent, r.Code, string(r.Body))

	op.RemoveUser("u-alice")
	require.Equal(t, "alice", whoami(t, s, ci)["user"], "the provider's word holds for the refresh interval")
	s.clock.Set(start.Add(6 * time.Minute))
	r = s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(ci)...)
	require.Equal(t, http.StatusUnauthorized, r.Code, "the removed user's token: %s", r.Body)
	require.Contains(t, string(r.Body), "no longer vouches")
	r = s.do(http.MethodGet, "/api/v1/tenants", nil, bearer(ci)...)
	require.Equal(t, http.StatusUnauthorized, r.Code, string(r.Body))

	op.AddUser("u-alice", "alice", "alice-secret-pw", "platform")
	b2 := newBrowser(t, op, toUI)
	b2.signIn(t, s.srv.URL+"/api/v1/auth/sso/start", "alice", "alice-secret-pw").Body.Close()
	require.Equal(t, "alice", whoami(t, s, ci)["user"], "the same account signed in again: its tokens are back")
}
