package identity_test

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/identity"
)

// ssoToken makes an API token of user, as POST /apitokens does.
func ssoToken(t *testing.T, e *env, name, user string) string {
	t.Helper()
	e.create(domain.APITokenKind, name, domain.APITokenSpec{User: user})
	tok, err := e.svc.IssueAPIToken(t.Context(), name, user)
	require.NoError(t, err)
	return tok
}

func reasonOf(t *testing.T, e *env, tok string) domain.Reason {
	t.Helper()
	_, err := e.svc.Authenticate(bearerRequest(tok))
	if err == nil {
		return ""
	}
	return domain.ReasonOf(err)
}

// TestRemovedSSOUserTokensEnd (issue 42, finding 8): a single sign-on
// user removed at the provider loses its API tokens with its sessions,
// also when no session is live any more to notice (the token of a CI job
// outlives the browser's session): the token asks the provider itself
// when the refresh interval has passed, the refusal suspends the user, and
// only a new sign-in of the same account brings the tokens back.
func TestRemovedSSOUserTokensEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		// live keeps the sign-in's session, which notices the refusal
		// first; else it is logged out before the user is removed.
		live bool
	}{
		{"the session notices", true},
		{"no session left: the token asks", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, op := ssoEnv(t)
			op.AddUser("u-dee", "dee", "dee-secret-pw")
			res := signIn(t, e, op, "dee", "dee-secret-pw", nil)
			ci := ssoToken(t, e, "dee-ci", "dee")
			require.Empty(t, reasonOf(t, e, ci))
			session := bearerRequest(res.Token)
			if !tc.live {
				require.NoError(t, e.svc.Logout(t.Context(), session))
			}

			op.RemoveUser("u-dee")
			require.Empty(t, reasonOf(t, e, ci), "the provider's word holds until the refresh interval passes")
			e.clock.Add(6 * time.Minute)
			if tc.live {
				_, err := e.svc.Authenticate(session)
				require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)
			}
			require.Equal(t, domain.ReasonUnauthorized, reasonOf(t, e, ci), "the removed user's token")
			e.clock.Add(time.Hour)
			require.Equal(t, domain.ReasonUnauthorized, reasonOf(t, e, ci), "suspended, not re-asked")

			// The same account back at the provider, signed in again: its
			// tokens work again.
			op.AddUser("u-dee", "dee", "dee-secret-pw")
			again := signIn(t, e, op, "dee", "dee-secret-pw", nil)
			require.Equal(t, res.Identity.UID, again.Identity.UID)
			require.Empty(t, reasonOf(t, e, ci))
		})
	}
}

// TestSSOTokenProviderDown: a provider that cannot be reached suspends
// nothing: a token whose check is due is answered 503, and works again
// once the provider answers.
func TestSSOTokenProviderDown(t *testing.T) {
	e, op := ssoEnv(t)
	op.AddUser("u-fin", "fin", "fin-secret-pw")
	signIn(t, e, op, "fin", "fin-secret-pw", nil)
	ci := ssoToken(t, e, "fin-ci", "fin")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	require.NoError(t, e.svc.EnableSSO(identity.OIDCConfig{Issuer: dead, ClientID: op.ClientID, ClientSecret: op.ClientSecret, RedirectURL: rpCallback}))
	e.clock.Add(6 * time.Minute)
	require.Equal(t, domain.ReasonServiceUnavailable, reasonOf(t, e, ci))

	require.NoError(t, e.svc.EnableSSO(identity.OIDCConfig{Issuer: op.Issuer, ClientID: op.ClientID, ClientSecret: op.ClientSecret, RedirectURL: rpCallback}))
	require.Empty(t, reasonOf(t, e, ci))
}

// TestSSOTokenWithoutTheProvidersWord: a token of a single sign-on user
// for whom the provider's word was never kept (a user of an earlier
// version that has not signed in since) is refused until the user signs
// in; a local user's token needs nothing of the kind.
func TestSSOTokenWithoutTheProvidersWord(t *testing.T) {
	e, op := ssoEnv(t)
	op.AddUser("u-gil", "gil", "gil-secret-pw")
	e.user("gil", domain.UserSpec{Role: domain.RoleNone, External: &domain.ExternalIdentity{Issuer: op.Issuer, Subject: "u-gil"}}, "")
	e.user("hal", domain.UserSpec{Role: domain.RoleView}, "")
	ci := ssoToken(t, e, "gil-ci", "gil")
	local := ssoToken(t, e, "hal-ci", "hal")
	require.Equal(t, domain.ReasonUnauthorized, reasonOf(t, e, ci))
	require.Empty(t, reasonOf(t, e, local))

	res := signIn(t, e, op, "gil", "gil-secret-pw", nil)
	require.Equal(t, "gil", res.Identity.Name, "found by issuer and subject")
	require.Empty(t, reasonOf(t, e, ci))

	// A restart with single sign-on off: no one can vouch for the user
	// once the check is due; local users' tokens go on.
	off, err := identity.NewService(t.Context(), identity.Config{PasswordCost: bcrypt.MinCost, Now: e.clock.Now}, e.store, e.cache)
	require.NoError(t, err)
	e.clock.Add(6 * time.Minute)
	_, err = off.Authenticate(bearerRequest(ci))
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)
	_, err = off.Authenticate(bearerRequest(local))
	require.NoError(t, err)
}

// TestSSOSessionOfAnEarlierVersion: a session record of an earlier version
// holds its own grant and its user has no standing. It keeps working; its
// first good refresh moves the grant to the user's standing, after which
// the user's API tokens work and a refusal at the provider ends them all.
func TestSSOSessionOfAnEarlierVersion(t *testing.T) {
	e, op := ssoEnv(t)
	op.AddUser("u-kai", "kai", "kai-secret-pw")
	res := signIn(t, e, op, "kai", "kai-secret-pw", nil)
	ci := ssoToken(t, e, "kai-ci", "kai")

	// Rewrite what the sign-in stored as an earlier version stored it.
	secrets, err := eventstore.OpenSecrets(t.Context(), e.store)
	require.NoError(t, err)
	raw, err := secrets.Get(t.Context(), "sso-user.kai")
	require.NoError(t, err)
	var standing struct {
		RT string `json:"rt"`
	}
	require.NoError(t, json.Unmarshal(raw, &standing))
	require.NotEmpty(t, standing.RT)
	key := "sso-session." + res.Identity.SessionID
	raw, err = secrets.Get(t.Context(), key)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(raw, &rec))
	delete(rec, "standing")
	rec["rt"] = standing.RT
	raw, err = json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, secrets.Put(t.Context(), key, raw))
	require.NoError(t, secrets.Delete(t.Context(), "sso-user.kai"))

	session := bearerRequest(res.Token)
	_, err = e.svc.Authenticate(session)
	require.NoError(t, err, "the earlier version's session goes on")
	require.Equal(t, domain.ReasonUnauthorized, reasonOf(t, e, ci), "no word of the provider on the user yet")

	e.clock.Add(6 * time.Minute)
	_, err = e.svc.Authenticate(session)
	require.NoError(t, err, "refreshed with its own grant")
	require.Empty(t, reasonOf(t, e, ci), "the grant moved to the user's standing")

	op.RemoveUser("u-kai")
	e.clock.Add(6 * time.Minute)
	require.Equal(t, domain.ReasonUnauthorized, reasonOf(t, e, ci))
	_, err = e.svc.Authenticate(session)
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)
}
