package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/internal/oidctest"
)

// ssoStack is the server with single sign-on through a real OpenID
// provider (zitadel/oidc's), keeping an audit log; the provider has the users alice (group platform) and
// bob (no group).
func ssoStack(t *testing.T, mutate ...func(*handlers.Config)) (*stack, *oidctest.Provider) {
	t.Helper()
	op := oidctest.Start(t)
	op.AddUser("u-alice", "alice", "alice-secret-pw", "platform")
	op.AddUser("u-bob", "bob", "bob-secret-pw")
	s, _ := newAuditedStack(t, nil, mutate...)
	callback := s.srv.URL + "/api/v1/auth/sso/callback"
	op.AllowRedirect(callback)
	require.NoError(t, s.identity.EnableSSO(identity.OIDCConfig{Issuer: op.Issuer, ClientID: op.ClientID,
		ClientSecret: op.ClientSecret, RedirectURL: callback}))
	return s, op
}

// browser is an HTTP client with cookies that stops at the redirect for
// which stop answers true and returns it.
type browser struct {
	c    *http.Client
	op   *oidctest.Provider
	stop func(*url.URL) bool
}

func newBrowser(t *testing.T, op *oidctest.Provider, stop func(*url.URL) bool) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	b := &browser{stop: stop, op: op}
	b.c = &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if b.stop != nil && b.stop(req.URL) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	return b
}

// signIn signs user in at op, starting at start.
func (b *browser) signIn(t *testing.T, start, user, password string) *http.Response {
	t.Helper()
	resp, err := b.op.SignIn(b.c, start, user, password)
	require.NoError(t, err)
	return resp
}

func (b *browser) cookie(server, name string) string {
	u, _ := url.Parse(server)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

func toUI(u *url.URL) bool { return strings.HasPrefix(u.Path, "/ui") }

func whoami(t *testing.T, s *stack, tok string) map[string]any {
	t.Helper()
	r := s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(tok)...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	var out map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &out))
	return out
}

// TestSSOGroupBindings: a user signs in at the provider, is created with
// role none, and gets edit on the tenants of team=platform through the
// group binding of "platform"; removed from the group at the provider, the
// next session refresh drops it, and an open watch ends.
func TestSSOGroupBindings(t *testing.T) {
	s, op := ssoStack(t, quickRecheck)
	s.mustCreate("/api/v1/tenants", tenantBody("plat", map[string]string{"team": "platform"}))
	s.mustCreate("/api/v1/tenants", tenantBody("other", nil))
	s.mustCreate("/api/v1/groupbindings", map[string]any{"metadata": map[string]any{"name": "platform-editors"},
		"spec": map[string]any{"groups": []string{"platform"}, "bindings": []any{map[string]any{"role": "edit", "tenantSelector": "team=platform"}}}})

	b := newBrowser(t, op, toUI)
	resp := b.signIn(t, s.srv.URL+"/api/v1/auth/sso/start?return=/ui/tenants/plat", "alice", "alice-secret-pw")
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, "/ui/tenants/plat", resp.Header.Get("Location"), "back where the login started")
	tok := b.cookie(s.srv.URL, identity.SessionCookie)
	require.NotEmpty(t, tok, "the session cookie")

	me := whoami(t, s, tok)
	require.Equal(t, "alice", me["user"])
	require.Equal(t, domain.RoleNone, me["role"], "created with role none: access comes from the group")
	require.Equal(t, []any{"platform"}, me["groups"])
	u := s.do(http.MethodGet, "/api/v1/users/alice", nil)
	require.Equal(t, http.StatusOK, u.Code)
	require.Contains(t, string(u.Body), `"subject":"u-alice"`, "keyed by issuer and subject")

	patch := append(bearer(tok), "Content-Type", "application/merge-patch+json")
	r := s.do(http.MethodPatch, "/api/v1/tenants/plat", `{"metadata":{"annotations":{"touched":"by-alice"}}}`, patch...)
	require.Equal(t, http.StatusOK, r.Code, "edit on team=platform: %s", r.Body)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/other", nil, bearer(tok)...).Code)
	require.Equal(t, http.StatusForbidden, s.do(http.MethodPost, "/api/v1/tenants", tenantBody("mine", nil), bearer(tok)...).Code)

	// The audit log has the sign-in, with the groups.
	require.Eventually(t, func() bool {
		a := s.do(http.MethodGet, "/api/v1/audit?kind="+handlers.AuditSSOLogin, nil)
		return a.Code == http.StatusOK && strings.Contains(string(a.Body), `"actor":"alice"`) && strings.Contains(string(a.Body), "groups: platform")
	}, 10*time.Second, 50*time.Millisecond)

	w := s.watch("/api/v1/tenants/plat/nodegroups?watch=true", "Authorization", "Bearer "+tok)

	// Out of the group at the provider: nothing changes until the session
	// asks the provider again (every 5 minutes by default, here by the clock).
	op.SetGroups("u-alice")
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/plat", nil, bearer(tok)...).Code)
	s.clock.Set(time.Now().Add(6 * time.Minute))
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/plat", nil, bearer(tok)...).Code)
	require.Nil(t, whoami(t, s, tok)["groups"])
	streamEnds(t, w, http.StatusNotFound)

	// Back in the group: the next login has it again.
	op.SetGroups("u-alice", "platform")
	b2 := newBrowser(t, op, toUI)
	b2.signIn(t, s.srv.URL+"/api/v1/auth/sso/start", "alice", "alice-secret-pw").Body.Close()
	tok2 := b2.cookie(s.srv.URL, identity.SessionCookie)
	require.Equal(t, []any{"platform"}, whoami(t, s, tok2)["groups"])
	require.Equal(t, "alice", whoami(t, s, tok2)["user"], "the same user, found by issuer and subject")
}

// TestSSOSessionEndsWhenProviderRefuses: a session whose refresh the
// provider refuses (the grant is gone: here the refresh token is no longer
// the provider's, as after a revocation or the user's removal) ends.
func TestSSOSessionEndsWhenProviderRefuses(t *testing.T) {
	s, op := ssoStack(t)
	b := newBrowser(t, op, toUI)
	b.signIn(t, s.srv.URL+"/api/v1/auth/sso/start", "bob", "bob-secret-pw").Body.Close()
	tok := b.cookie(s.srv.URL, identity.SessionCookie)
	require.Equal(t, "bob", whoami(t, s, tok)["user"])

	// A provider restarted without its grants refuses every refresh token.
	op2 := oidctest.Start(t)
	op2.AllowRedirect(s.srv.URL + "/api/v1/auth/sso/callback")
	require.NoError(t, s.identity.EnableSSO(identity.OIDCConfig{Issuer: op2.Issuer, ClientID: op2.ClientID,
		ClientSecret: op2.ClientSecret, RedirectURL: s.srv.URL + "/api/v1/auth/sso/callback"}))
	s.clock.Set(time.Now().Add(6 * time.Minute))
	r := s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(tok)...)
	require.Equal(t, http.StatusUnauthorized, r.Code, string(r.Body))
	s.clock.Set(time.Time{})
	r = s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(tok)...)
	require.Equal(t, http.StatusUnauthorized, r.Code, "the session stays ended: %s", r.Body)
}

// TestSSOCLILoopback is rezusctl login --sso's flow: the callback sends the
// browser to the loopback address with a one-time code, which only the
// holder of the PKCE verifier can exchange, once.
func TestSSOCLILoopback(t *testing.T) {
	s, op := ssoStack(t)
	loopback := "http://127.0.0.1:38123/callback"
	start := func(verifier string) (code, state string) {
		b := newBrowser(t, op, func(u *url.URL) bool { return u.Host == "127.0.0.1:38123" })
		q := url.Values{"cli_redirect": {loopback}, "cli_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "cli_state": {"cli-state-1"}}
		resp := b.signIn(t, s.srv.URL+"/api/v1/auth/sso/start?"+q.Encode(), "alice", "alice-secret-pw")
		resp.Body.Close()
		require.Equal(t, http.StatusFound, resp.StatusCode)
		loc, err := url.Parse(resp.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1:38123", loc.Host)
		require.Empty(t, b.cookie(s.srv.URL, identity.SessionCookie), "no session cookie for the browser of a CLI login")
		return loc.Query().Get("code"), loc.Query().Get("state")
	}
	verifier := oauth2.GenerateVerifier()
	code, state := start(verifier)
	require.Equal(t, "cli-state-1", state)
	exchange := func(code, verifier string) response {
		return s.do(http.MethodPost, "/api/v1/auth/sso/token", fmt.Sprintf(`{"code":%q,"codeVerifier":%q}`, code, verifier), "Authorization", "")
	}
	r := exchange(code, verifier)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	var got struct {
		Token, User string
	}
	require.NoError(t, json.Unmarshal(r.Body, &got))
	require.Equal(t, "alice", got.User)
	require.Equal(t, "alice", whoami(t, s, got.Token)["user"])
	require.Equal(t, http.StatusUnauthorized, exchange(code, verifier).Code, "a code is good once")

	code, _ = start(verifier)
	require.Equal(t, http.StatusUnauthorized, exchange(code, oauth2.GenerateVerifier()).Code, "not without the verifier")
	require.Equal(t, http.StatusUnauthorized, exchange(code, verifier).Code, "a wrong verifier spends the code")
}

// TestSSOStartRefusesOtherRedirects: the CLI redirect must be a loopback
// address and the web return path a web UI path of this server.
func TestSSOStartRefusesOtherRedirects(t *testing.T) {
	s, op := ssoStack(t)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, bad := range []string{"http://evil.example:8080/cb", "https://127.0.0.1:9/cb", "http://127.0.0.1/cb", "http://user@127.0.0.1:9/cb"} {
		q := url.Values{"cli_redirect": {bad}, "cli_challenge": {oauth2.S256ChallengeFromVerifier("v")}, "cli_state": {"s"}}
		resp, err := c.Get(s.srv.URL + "/api/v1/auth/sso/start?" + q.Encode())
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}
	b := newBrowser(t, op, toUI)
	for _, ret := range []string{"//evil.example/ui", "https://evil.example/ui", "/api/v1/tenants", "/ui\\@evil"} {
		resp := b.signIn(t, s.srv.URL+"/api/v1/auth/sso/start?return="+url.QueryEscape(ret), "bob", "bob-secret-pw")
		resp.Body.Close()
		require.Equal(t, "/ui/", resp.Header.Get("Location"), ret)
	}
	// A callback without the browser's state cookie, or with another state, is refused.
	resp, err := c.Get(s.srv.URL + "/api/v1/auth/sso/callback?code=x&state=y")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// TestSSONeverTakesOverALocalUser: a provider's user whose preferred name
// is a local user's gets a name of its own.
func TestSSONeverTakesOverALocalUser(t *testing.T) {
	s, op := ssoStack(t)
	s.createUser("alice", domain.RoleAdmin, alicePassword)
	b := newBrowser(t, op, toUI)
	b.signIn(t, s.srv.URL+"/api/v1/auth/sso/start", "alice", "alice-secret-pw").Body.Close()
	me := whoami(t, s, b.cookie(s.srv.URL, identity.SessionCookie))
	require.NotEqual(t, "alice", me["user"])
	require.True(t, strings.HasPrefix(me["user"].(string), "alice-"), me["user"])
	require.Equal(t, domain.RoleNone, me["role"])
}

// TestPasswordLoginCanBeDisabled: with password login off, local users
// cannot log in; the static token (break-glass) and single sign-on remain.
func TestPasswordLoginCanBeDisabled(t *testing.T) {
	s := newStackWith(t, func(c *identity.Config) { c.DisablePasswordLogin = true })
	s.createUser("carol", domain.RoleView, alicePassword)
	r := s.login("carol", alicePassword)
	require.Equal(t, http.StatusForbidden, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), "single sign-on")
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants", nil).Code, "the static token still works")
	info := s.do(http.MethodGet, "/api/v1/auth/sso", nil, "Authorization", "")
	require.Equal(t, http.StatusOK, info.Code)
	require.JSONEq(t, `{"sso":false,"passwordLogin":false}`, string(info.Body))
}

// TestSSOClusterCertificateCarriesGroups: a single sign-on user's cluster
// certificate has the group of its role on the tenant (from a group
// binding here) and its provider groups, prefixed "oidc:", so a provider
// group named system:masters cannot pass for Kubernetes's own.
func TestSSOClusterCertificateCarriesGroups(t *testing.T) {
	s := newTalosStack(t)
	s.acme()
	r := s.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp1/config", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	cp, err := configloader.NewFromBytes(r.Body)
	require.NoError(t, err)
	op := oidctest.Start(t)
	op.AddUser("u-fay", "fay", "fay-secret-pw", "platform", "system:masters")
	callback := s.srv.URL + "/api/v1/auth/sso/callback"
	op.AllowRedirect(callback)
	require.NoError(t, s.identity.EnableSSO(identity.OIDCConfig{Issuer: op.Issuer, ClientID: op.ClientID, ClientSecret: op.ClientSecret, RedirectURL: callback}))
	s.mustCreate("/api/v1/groupbindings", map[string]any{"metadata": map[string]any{"name": "platform"},
		"spec": map[string]any{"groups": []string{"platform"}, "bindings": []any{map[string]any{"role": "view", "tenants": []string{"acme"}}}}})

	b := newBrowser(t, op, toUI)
	b.signIn(t, s.srv.URL+"/api/v1/auth/sso/start", "fay", "fay-secret-pw").Body.Close()
	tok := b.cookie(s.srv.URL, identity.SessionCookie)
	r = s.do(http.MethodPost, "/api/v1/tenants/acme/kubernetes/credential", nil, bearer(tok)...)
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
	var ec struct {
		Status struct{ ClientCertificateData string }
	}
	require.NoError(t, json.Unmarshal(r.Body, &ec))
	c := verifyClientCert(t, cp.Cluster().IssuingCA().Crt, []byte(ec.Status.ClientCertificateData))
	require.Equal(t, "fay", c.Subject.CommonName)
	require.ElementsMatch(t, []string{"rezuscloud:view", "oidc:platform", "oidc:system:masters"}, c.Subject.Organization)
}
