package identity_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/internal/oidctest"
)

const rpCallback = "http://rezus.test/api/v1/auth/sso/callback"

// ssoEnv is an identity service with single sign-on through a real
// provider; the callback's host is never reached: signIn stops at the
// redirect to it and hands its code to FinishSSO, as the handler would.
func ssoEnv(t *testing.T) (*env, *oidctest.Provider) {
	t.Helper()
	e := newEnv(t)
	op := oidctest.Start(t)
	op.AllowRedirect(rpCallback)
	require.NoError(t, e.svc.EnableSSO(identity.OIDCConfig{Issuer: op.Issuer, ClientID: op.ClientID, ClientSecret: op.ClientSecret, RedirectURL: rpCallback}))
	return e, op
}

// signIn runs a login from StartSSO to FinishSSO.
func signIn(t *testing.T, e *env, op *oidctest.Provider, user, password string, cli *identity.CLILogin) identity.SSOResult {
	t.Helper()
	start, err := e.svc.StartSSO(t.Context(), "/ui/tenants", cli)
	require.NoError(t, err)
	client := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if r.URL.Host == "rezus.test" {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := op.SignIn(client, start.AuthURL, user, password)
	require.NoError(t, err)
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "rezus.test", loc.Host, "back at the callback")
	res, err := e.svc.FinishSSO(t.Context(), start.Cookie, loc.Query().Get("state"), loc.Query().Get("code"))
	require.NoError(t, err)
	return res
}

func TestSSOGroupsAndRefresh(t *testing.T) {
	e, op := ssoEnv(t)
	op.AddUser("u-ann", "ann", "ann-secret-pw", "platform", "auditors")
	e.create(domain.GroupBindingKind, "platform", domain.GroupBindingSpec{Groups: []string{"platform"}, Role: domain.RoleNone,
		Bindings: []domain.RoleBinding{{Role: domain.RoleEdit, TenantSelector: "team=platform"}}})
	e.create(domain.GroupBindingKind, "auditors", domain.GroupBindingSpec{Groups: []string{"auditors"}, Role: domain.RoleView})

	res := signIn(t, e, op, "ann", "ann-secret-pw", nil)
	require.Equal(t, "/ui/tenants", res.Return)
	require.Equal(t, "ann", res.Identity.Name)
	id, err := e.svc.Authenticate(bearerRequest(res.Token))
	require.NoError(t, err)
	require.Equal(t, []string{"platform", "auditors"}, id.Groups)
	require.Equal(t, domain.RoleView, id.Role, "the auditors' global role over the user's none")
	acc := id.Access()
	require.Equal(t, domain.RoleEdit, acc.TenantRole("p1", map[string]string{"team": "platform"}))
	require.Equal(t, domain.RoleView, acc.TenantRole("other", nil))

	// A changed binding counts at the next request, without a new login.
	e.update(domain.GroupBindingKind, "auditors", domain.GroupBindingSpec{Groups: []string{"auditors"}, Role: domain.RoleAdmin})
	id, err = e.svc.Authenticate(bearerRequest(res.Token))
	require.NoError(t, err)
	require.Equal(t, domain.RoleAdmin, id.Role)
	e.remove(domain.GroupBindingKind, "auditors")
	id, err = e.svc.Authenticate(bearerRequest(res.Token))
	require.NoError(t, err)
	require.Equal(t, domain.RoleNone, id.Role)

	// Out of "platform" at the provider: the session keeps what it had until
	// its refresh, then loses it.
	op.SetGroups("u-ann", "auditors")
	id, err = e.svc.Authenticate(bearerRequest(res.Token))
	require.NoError(t, err)
	require.Equal(t, []string{"platform", "auditors"}, id.Groups)
	e.clock.Add(6 * time.Minute)
	id, err = e.svc.Authenticate(bearerRequest(res.Token))
	require.NoError(t, err)
	require.Equal(t, []string{"auditors"}, id.Groups)
	require.Equal(t, domain.RoleNone, id.Access().TenantRole("p1", map[string]string{"team": "platform"}))

	// The same account signs in again as the same user.
	again := signIn(t, e, op, "ann", "ann-secret-pw", nil)
	require.Equal(t, res.Identity.UID, again.Identity.UID)

	// Logout ends the session and its record.
	r := bearerRequest(again.Token)
	require.NoError(t, e.svc.Logout(t.Context(), r))
	_, err = e.svc.Authenticate(r)
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err))
}

func TestSSODisabledUserCannotSignIn(t *testing.T) {
	e, op := ssoEnv(t)
	op.AddUser("u-bo", "bo", "bo-secret-pw")
	res := signIn(t, e, op, "bo", "bo-secret-pw", nil)
	e.update(domain.UserKind, res.Identity.Name, domain.UserSpec{Role: domain.RoleNone, Disabled: true,
		External: &domain.ExternalIdentity{Issuer: op.Issuer, Subject: "u-bo"}})
	_, err := e.svc.Authenticate(bearerRequest(res.Token))
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)

	start, err := e.svc.StartSSO(t.Context(), "", nil)
	require.NoError(t, err)
	client := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if r.URL.Host == "rezus.test" {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := op.SignIn(client, start.AuthURL, "bo", "bo-secret-pw")
	require.NoError(t, err)
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	_, err = e.svc.FinishSSO(t.Context(), start.Cookie, loc.Query().Get("state"), loc.Query().Get("code"))
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "a disabled user gets no session: %v", err)
}

func TestSSOCLICode(t *testing.T) {
	e, op := ssoEnv(t)
	op.AddUser("u-cy", "cy", "cy-secret-pw", "sre")
	verifier := oauth2.GenerateVerifier()
	cli := &identity.CLILogin{Redirect: "http://127.0.0.1:40001/callback", Challenge: oauth2.S256ChallengeFromVerifier(verifier), State: "st"}
	code := func() string {
		res := signIn(t, e, op, "cy", "cy-secret-pw", cli)
		require.Empty(t, res.Token, "no session token in the browser's answer")
		u, err := url.Parse(res.CLIRedirect)
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1:40001", u.Host)
		require.Equal(t, "st", u.Query().Get("state"))
		return u.Query().Get("code")
	}

	c := code()
	tok, _, id, err := e.svc.ExchangeCLICode(t.Context(), c, verifier)
	require.NoError(t, err)
	require.Equal(t, "cy", id.Name)
	require.Equal(t, []string{"sre"}, id.Groups)
	_, err = e.svc.Authenticate(bearerRequest(tok))
	require.NoError(t, err)
	_, _, _, err = e.svc.ExchangeCLICode(t.Context(), c, verifier)
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "once")

	c = code()
	_, _, _, err = e.svc.ExchangeCLICode(t.Context(), c, oauth2.GenerateVerifier())
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "not without the verifier")

	c = code()
	e.clock.Add(3 * time.Minute)
	_, _, _, err = e.svc.ExchangeCLICode(t.Context(), c, verifier)
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "expired")
}
