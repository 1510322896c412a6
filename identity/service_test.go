package identity_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// env is an identity service on a real embedded NATS with its read model.
type env struct {
	t     *testing.T
	svc   *identity.Service
	store *eventstore.Store
	cache *projections.Cache
	clock *clock
}

func newEnv(t *testing.T, mutate ...func(*identity.Config)) *env {
	t.Helper()
	es := eventstoretest.Start(t)
	cache := projections.NewCache(es.Store, nil)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	c := &clock{now: time.Now().UTC().Truncate(time.Second)}
	cfg := identity.Config{PasswordCost: bcrypt.MinCost, Now: c.Now, StaticToken: "break-glass-token"}
	for _, m := range mutate {
		m(&cfg)
	}
	svc, err := identity.NewService(t.Context(), cfg, es.Store, cache)
	require.NoError(t, err)
	require.NoError(t, cache.Sync(t.Context()))
	return &env{t: t, svc: svc, store: es.Store, cache: cache, clock: c}
}

// create writes an object as an admin would and waits for the read model.
func (e *env) create(k *domain.KindInfo, name string, spec any) {
	e.t.Helper()
	raw, err := json.Marshal(spec)
	require.NoError(e.t, err)
	res, err := e.store.Execute(e.t.Context(), domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(k, "", name),
		Object: &domain.Object{Spec: raw}, Actor: "test", Now: e.clock.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{})
	require.NoError(e.t, err)
	require.NoError(e.t, e.cache.WaitFor(e.t.Context(), res.Seq))
}

// update changes an object's spec.
func (e *env) update(k *domain.KindInfo, name string, spec any) {
	e.t.Helper()
	raw, err := json.Marshal(spec)
	require.NoError(e.t, err)
	obj, ok := e.cache.GetObject(domain.ObjectRef(k, "", name))
	require.True(e.t, ok)
	obj.Spec = raw
	res, err := e.store.Execute(e.t.Context(), domain.Command{Op: domain.OpUpdate, Ref: domain.ObjectRef(k, "", name),
		Object: obj, Actor: "test", Now: e.clock.Now()}, eventstore.UpdateOptions{})
	require.NoError(e.t, err)
	require.NoError(e.t, e.cache.WaitFor(e.t.Context(), res.Seq))
}

func (e *env) remove(k *domain.KindInfo, name string) {
	e.t.Helper()
	res, err := e.store.Execute(e.t.Context(), domain.Command{Op: domain.OpDelete, Ref: domain.ObjectRef(k, "", name),
		Actor: "test", Now: e.clock.Now()}, eventstore.UpdateOptions{})
	require.NoError(e.t, err)
	require.NoError(e.t, e.cache.WaitFor(e.t.Context(), res.Seq))
}

func (e *env) user(name string, spec domain.UserSpec, password string) {
	e.t.Helper()
	if password != "" {
		require.NoError(e.t, e.svc.SetPassword(e.t.Context(), name, password))
	}
	e.create(domain.UserKind, name, spec)
}

func (e *env) login(name, password string) (string, error) {
	tok, _, _, err := e.svc.Login(e.t.Context(), name, password, "192.0.2.1")
	return tok, err
}

func bearerRequest(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/tenants", nil)
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return r
}

const pw = "a password long enough"

func TestAuthenticate(t *testing.T) {
	e := newEnv(t)
	e.user("ann", domain.UserSpec{Role: domain.RoleEdit}, pw)
	e.user("dan", domain.UserSpec{Role: domain.RoleView}, pw)
	e.user("gone", domain.UserSpec{Role: domain.RoleView}, pw)
	ann, err := e.login("ann", pw)
	require.NoError(t, err)
	dan, err := e.login("dan", pw)
	require.NoError(t, err)
	gone, err := e.login("gone", pw)
	require.NoError(t, err)
	loggedOut, err := e.login("ann", pw)
	require.NoError(t, err)
	require.NoError(t, e.svc.Logout(t.Context(), bearerRequest(loggedOut)))
	e.update(domain.UserKind, "dan", domain.UserSpec{Role: domain.RoleView, Disabled: true})
	e.remove(domain.UserKind, "gone")
	e.user("gone", domain.UserSpec{Role: domain.RoleAdmin}, pw) // another user of that name

	e.create(domain.APITokenKind, "ci", domain.APITokenSpec{User: "ann"})
	ci, err := e.svc.IssueAPIToken(t.Context(), "ci", "ann")
	require.NoError(t, err)
	e.create(domain.APITokenKind, "narrow", domain.APITokenSpec{User: "ann", Bindings: []domain.RoleBinding{{Role: domain.RoleView, Tenants: []string{"acme"}}}})
	narrow, err := e.svc.IssueAPIToken(t.Context(), "narrow", "ann")
	require.NoError(t, err)
	e.create(domain.APITokenKind, "revoked", domain.APITokenSpec{User: "ann"})
	revoked, err := e.svc.IssueAPIToken(t.Context(), "revoked", "ann")
	require.NoError(t, err)
	require.NoError(t, e.svc.RevokeAPIToken(t.Context(), "revoked"))
	past := e.clock.Now().Add(-time.Minute)
	e.create(domain.APITokenKind, "old", domain.APITokenSpec{User: "ann", ExpiresAt: &past})
	old, err := e.svc.IssueAPIToken(t.Context(), "old", "ann")
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		req    *http.Request
		user   string
		role   string
		method string
		reason domain.Reason
	}{
		{name: "a session", req: bearerRequest(ann), user: "ann", role: domain.RoleEdit, method: identity.AuthSession},
		{name: "a session cookie", req: func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/ui/", nil)
			r.AddCookie(&http.Cookie{Name: identity.SessionCookie, Value: ann})
			return r
		}(), user: "ann", role: domain.RoleEdit, method: identity.AuthSession},
		{name: "an API token", req: bearerRequest(ci), user: "ann", role: domain.RoleEdit, method: identity.AuthAPIToken},
		{name: "a narrowed token has no global role", req: bearerRequest(narrow), user: "ann", role: domain.RoleNone, method: identity.AuthAPIToken},
		{name: "the static token", req: bearerRequest("break-glass-token"), user: "admin", role: domain.RoleAdmin, method: identity.AuthStaticToken},
		{name: "nothing", req: bearerRequest(""), reason: domain.ReasonUnauthorized},
		{name: "not bearer", req: func() *http.Request {
			r := bearerRequest("")
			r.Header.Set("Authorization", "Basic YTpi")
			return r
		}(), reason: domain.ReasonUnauthorized},
		{name: "a forged session", req: bearerRequest(ann[:len(ann)-4] + "AAAA"), reason: domain.ReasonUnauthorized},
		{name: "a session logged out", req: bearerRequest(loggedOut), reason: domain.ReasonUnauthorized},
		{name: "a disabled user's session", req: bearerRequest(dan), reason: domain.ReasonUnauthorized},
		{name: "a session of a deleted user, whose name is another's now", req: bearerRequest(gone), reason: domain.ReasonUnauthorized},
		{name: "a revoked token", req: bearerRequest(revoked), reason: domain.ReasonUnauthorized},
		{name: "an expired token", req: bearerRequest(old), reason: domain.ReasonUnauthorized},
		{name: "a token with a wrong secret", req: bearerRequest(ci[:len(ci)-3] + "xyz"), reason: domain.ReasonUnauthorized},
		{name: "a token of no one", req: bearerRequest("rzt_nobody_secret"), reason: domain.ReasonUnauthorized},
		{name: "another static token", req: bearerRequest("break-glass-tokem"), reason: domain.ReasonUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := e.svc.Authenticate(tc.req)
			if tc.reason != "" {
				require.Equal(t, tc.reason, domain.ReasonOf(err), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.user, id.Name)
			require.Equal(t, tc.role, id.Role)
			require.Equal(t, tc.method, id.AuthMethod)
		})
	}

	t.Run("a session ends with its lifetime", func(t *testing.T) {
		tok, err := e.login("ann", pw)
		require.NoError(t, err)
		e.clock.Add(13 * time.Hour)
		defer e.clock.Add(-13 * time.Hour)
		_, err = e.svc.Authenticate(bearerRequest(tok))
		require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)
	})
}

func TestLogin(t *testing.T) {
	e := newEnv(t, func(c *identity.Config) { c.LoginFailures = 3 })
	e.user("ann", domain.UserSpec{Role: domain.RoleEdit}, pw)
	e.user("ext", domain.UserSpec{Role: domain.RoleEdit, External: &domain.ExternalIdentity{Issuer: "https://idp.example", Subject: "s1"}}, pw)
	e.user("off", domain.UserSpec{Role: domain.RoleEdit, Disabled: true}, pw)
	for _, tc := range []struct {
		name, user, password string
		reason               domain.Reason
	}{
		{"the password", "ann", pw, ""},
		{"a wrong password", "ann", "not the password at all", domain.ReasonUnauthorized},
		{"an unknown user", "nobody", pw, domain.ReasonUnauthorized},
		{"a disabled user", "off", pw, domain.ReasonUnauthorized},
		{"a user of an identity provider", "ext", pw, domain.ReasonUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, _, id, err := e.svc.Login(t.Context(), tc.user, tc.password, "192.0.2."+tc.user)
			if tc.reason != "" {
				require.Equal(t, tc.reason, domain.ReasonOf(err), "%v", err)
				return
			}
			require.NoError(t, err)
			require.NotEmpty(t, tok)
			require.Equal(t, tc.user, id.Name)
			require.NotEmpty(t, id.SessionID)
		})
	}
	t.Run("guessing is held back", func(t *testing.T) {
		for range 3 {
			_, err := e.login("ann", "wrong wrong wrong")
			require.Contains(t, []domain.Reason{domain.ReasonUnauthorized, domain.ReasonTooManyRequests}, domain.ReasonOf(err))
		}
		_, err := e.login("ann", pw)
		require.Equal(t, domain.ReasonTooManyRequests, domain.ReasonOf(err), "even the right password waits: %v", err)
	})
	t.Run("password login turned off", func(t *testing.T) {
		off := newEnv(t, func(c *identity.Config) { c.DisablePasswordLogin = true })
		off.user("ann", domain.UserSpec{Role: domain.RoleEdit}, pw)
		_, err := off.login("ann", pw)
		require.Equal(t, domain.ReasonForbidden, domain.ReasonOf(err), "%v", err)
		require.False(t, off.svc.PasswordLogin())
	})
}

func TestRevokeUser(t *testing.T) {
	e := newEnv(t)
	e.user("ann", domain.UserSpec{Role: domain.RoleEdit}, pw)
	e.user("bea", domain.UserSpec{Role: domain.RoleEdit}, pw)
	s1, _ := e.login("ann", pw)
	s2, _ := e.login("ann", pw)
	other, _ := e.login("bea", pw)
	e.create(domain.APITokenKind, "t1", domain.APITokenSpec{User: "ann"})
	t1, err := e.svc.IssueAPIToken(t.Context(), "t1", "ann")
	require.NoError(t, err)

	require.NoError(t, e.svc.EndSessions(t.Context(), "ann", mustID(t, e, s2)))
	_, err = e.svc.Authenticate(bearerRequest(s1))
	require.Error(t, err, "ended")
	_, err = e.svc.Authenticate(bearerRequest(s2))
	require.NoError(t, err, "the session kept")

	require.NoError(t, e.svc.RevokeUser(t.Context(), "ann", "admin", "corr-1"))
	for name, tok := range map[string]string{"session": s2, "token": t1} {
		_, err := e.svc.Authenticate(bearerRequest(tok))
		require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), name)
	}
	ok, err := e.svc.CheckPassword(t.Context(), "ann", pw)
	require.NoError(t, err)
	require.False(t, ok, "the password is gone")
	_, err = e.svc.Authenticate(bearerRequest(other))
	require.NoError(t, err, "another user's session stays")
	require.NoError(t, e.cache.Sync(t.Context()))
	require.Zero(t, e.svc.TokenCount("ann"))
}

func mustID(t *testing.T, e *env, tok string) string {
	t.Helper()
	id, err := e.svc.Authenticate(bearerRequest(tok))
	require.NoError(t, err)
	return id.SessionID
}

func TestCSRF(t *testing.T) {
	e := newEnv(t)
	tok := e.svc.CSRFToken("session-a")
	for _, tc := range []struct {
		name, binding, token string
		ok                   bool
	}{
		{"its own", "session-a", tok, true},
		{"another session's", "session-b", tok, false},
		{"empty token", "session-a", "", false},
		{"empty binding", "", e.svc.CSRFToken(""), false},
		{"tampered", "session-a", tok[:len(tok)-2] + "AA", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.ok, e.svc.CheckCSRF(tc.binding, tc.token))
		})
	}
}

func TestStateCredentials(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	user, pass, err := e.svc.IssueStateCredentials(ctx, "acme", "apply-1", time.Minute)
	require.NoError(t, err)
	_, otherPass, err := e.svc.IssueStateCredentials(ctx, "acme", "apply-2", time.Minute)
	require.NoError(t, err)
	require.NoError(t, e.svc.RevokeStateCredentials(ctx, user, otherPass))
	for _, tc := range []struct {
		name, tenant, user, pass string
		reason                   domain.Reason
	}{
		{"its tenant", "acme", user, pass, ""},
		{"another tenant", "beta", user, pass, domain.ReasonForbidden},
		{"revoked", "acme", user, otherPass, domain.ReasonUnauthorized},
		{"another user name", "acme", "admin", pass, domain.ReasonUnauthorized},
		{"tampered", "acme", user, pass[:len(pass)-2] + "AA", domain.ReasonUnauthorized},
		{"not a credential", "acme", user, "v2.e30.AAAA", domain.ReasonUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.svc.VerifyStateCredentials(ctx, tc.tenant, tc.user, tc.pass)
			if tc.reason != "" {
				require.Equal(t, tc.reason, domain.ReasonOf(err), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "apply-1", c.ApplyID)
		})
	}
	e.clock.Add(2 * time.Minute)
	_, err = e.svc.VerifyStateCredentials(ctx, "acme", user, pass)
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "expired: %v", err)
	for _, bad := range []struct{ tenant, apply string }{{"Not_A_Name", "a"}, {"acme", ""}} {
		_, _, err := e.svc.IssueStateCredentials(ctx, bad.tenant, bad.apply, time.Minute)
		require.Equal(t, domain.ReasonBadRequest, domain.ReasonOf(err), "%v", err)
	}
}

func TestExchangeCLICodeRefusesUnknownCodes(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ name, code, verifier string }{
		{"empty", "", "v"},
		{"unknown", "no-such-code", "verifier"},
		{"oversized", string(make([]byte, 200)), "verifier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := e.svc.ExchangeCLICode(t.Context(), tc.code, tc.verifier)
			require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)
		})
	}
	_, err := e.svc.StartSSO(t.Context(), "/ui/", nil)
	require.Equal(t, domain.ReasonNotFound, domain.ReasonOf(err), "single sign-on is off: %v", err)
	require.False(t, e.svc.SSOEnabled())
}
