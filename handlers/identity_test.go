package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
)

const alicePassword = "correct horse battery staple"

// createUser makes a user with a password through the API, as the admin.
func (s *stack) createUser(name, role, password string) {
	s.t.Helper()
	body := fmt.Sprintf(`{"metadata":{"name":%q},"spec":{"role":%q,"password":%q}}`, name, role, password)
	r := s.do(http.MethodPost, "/api/v1/users", body)
	require.Equal(s.t, http.StatusCreated, r.Code, string(r.Body))
}

func (s *stack) login(name, password string) response {
	s.t.Helper()
	return s.do(http.MethodPost, "/api/v1/auth/login", fmt.Sprintf(`{"username":%q,"password":%q}`, name, password), "Authorization", "")
}

func (s *stack) sessionToken(name, password string) string {
	s.t.Helper()
	r := s.login(name, password)
	require.Equal(s.t, http.StatusOK, r.Code, string(r.Body))
	var body struct {
		Token string `json:"token"`
	}
	require.NoError(s.t, json.Unmarshal(r.Body, &body))
	return body.Token
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// allStoredBytes returns every message of every stream but the secrets bucket:
// where a secret must never appear.
func (s *stack) allStoredBytes() string {
	ctx := context.Background()
	js := s.env.Store.JetStream()
	var b strings.Builder
	for name := range js.StreamNames(ctx).Name() {
		if name == "KV_"+eventstore.SecretsBucket {
			continue
		}
		st, err := js.Stream(ctx, name)
		require.NoError(s.t, err)
		info, err := st.Info(ctx)
		require.NoError(s.t, err)
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err == nil {
				b.Write(m.Data)
				for k, v := range m.Header {
					b.WriteString(k + strings.Join(v, ""))
				}
			}
		}
	}
	return b.String()
}

func TestLoginSessionsAndPasswords(t *testing.T) {
	s := newStack(t)
	s.createUser("alice", domain.RoleEdit, alicePassword)

	// The password is write-only: not in the object, not in any stream.
	u := s.do(http.MethodGet, "/api/v1/users/alice", nil)
	require.Equal(t, http.StatusOK, u.Code)
	require.NotContains(t, string(u.Body), "password")
	require.NotContains(t, s.allStoredBytes(), alicePassword)

	require.Equal(t, http.StatusUnauthorized, s.login("alice", "wrong password here").Code)
	require.Equal(t, http.StatusUnauthorized, s.login("nobody", alicePassword).Code)

	r := s.login("alice", alicePassword)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	cookie := r.Header.Get("Set-Cookie")
	require.Contains(t, cookie, identity.SessionCookie+"=")
	require.Contains(t, cookie, "HttpOnly")
	require.Contains(t, cookie, "SameSite=Lax")
	var login struct{ Token, ExpiresAt, User, Role string }
	require.NoError(t, json.Unmarshal(r.Body, &login))
	require.Equal(t, "alice", login.User)
	require.Equal(t, domain.RoleEdit, login.Role)
	exp, err := time.Parse(time.RFC3339, login.ExpiresAt)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(12*time.Hour), exp, time.Minute)

	who := s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(login.Token)...)
	require.JSONEq(t, `{"user":"alice","role":"edit","authMethod":"session"}`, string(who.Body))
	// The cookie alone authenticates too (the browser's way).
	cookieOnly := s.do(http.MethodGet, "/api/v1/auth/whoami", nil, "Authorization", "", "Cookie", identity.SessionCookie+"="+login.Token)
	require.Equal(t, http.StatusOK, cookieOnly.Code)

	// Logout revokes the session at once.
	require.Equal(t, http.StatusNoContent, s.do(http.MethodPost, "/api/v1/auth/logout", nil, bearer(login.Token)...).Code)
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(login.Token)...).Code)

	// A tampered token is refused.
	tok := s.sessionToken("alice", alicePassword)
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(tok[:len(tok)-2]+"xx")...).Code)

	// Own password change needs the current one; others' are admin business.
	s.createUser("bob", domain.RoleView, "bobs password is long")
	wrong := s.do(http.MethodPut, "/api/v1/users/alice/password", `{"password":"a brand new password","currentPassword":"nope nope nope"}`, bearer(tok)...)
	require.Equal(t, http.StatusUnprocessableEntity, wrong.Code)
	short := s.do(http.MethodPut, "/api/v1/users/alice/password", `{"password":"short","currentPassword":"`+alicePassword+`"}`, bearer(tok)...)
	require.Equal(t, http.StatusUnprocessableEntity, short.Code)
	require.Contains(t, string(short.Body), `"field":"password"`)
	ok := s.do(http.MethodPut, "/api/v1/users/alice/password", `{"password":"a brand new password","currentPassword":"`+alicePassword+`"}`, bearer(tok)...)
	require.Equal(t, http.StatusNoContent, ok.Code, string(ok.Body))
	require.Equal(t, http.StatusForbidden, s.do(http.MethodPut, "/api/v1/users/bob/password", `{"password":"alice sets bobs pw"}`, bearer(tok)...).Code)
	require.Equal(t, http.StatusNoContent, s.do(http.MethodPut, "/api/v1/users/bob/password", `{"password":"admin resets bob now"}`).Code)
	s.sessionToken("bob", "admin resets bob now")
	s.sessionToken("alice", "a brand new password")

	// Disabling a user refuses their live session at once; so does deleting them.
	tok = s.sessionToken("alice", "a brand new password")
	require.Equal(t, http.StatusOK, s.do(http.MethodPatch, "/api/v1/users/alice", `{"spec":{"disabled":true}}`).Code)
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(tok)...).Code)
	require.Equal(t, http.StatusUnauthorized, s.login("alice", "a brand new password").Code)
	btok := s.sessionToken("bob", "admin resets bob now")
	require.Equal(t, http.StatusOK, s.do(http.MethodDelete, "/api/v1/users/bob", nil).Code)
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(btok)...).Code)

	// Bad passwords are refused with the field.
	bad := s.do(http.MethodPost, "/api/v1/users", `{"metadata":{"name":"carol"},"spec":{"role":"view","password":"short"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, bad.Code)
	require.Contains(t, string(bad.Body), `"field":"spec.password"`)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/users/carol", nil).Code)
}

func TestFailedLoginsAreRateLimited(t *testing.T) {
	s := newStack(t)
	// The clock stands still: the limiter's one-minute window must not pass
	// while a loaded machine works through the bcrypt hashes below.
	start := time.Now()
	s.clock.Set(start)
	s.createUser("alice", domain.RoleView, alicePassword)
	for range 5 {
		require.Equal(t, http.StatusUnauthorized, s.login("alice", "wrong password!!").Code)
	}
	blocked := s.login("alice", alicePassword)
	require.Equal(t, http.StatusTooManyRequests, blocked.Code)
	require.NotEmpty(t, blocked.Header.Get("Retry-After"))
	require.Equal(t, domain.ReasonTooManyRequests, blocked.status(t).Reason)
	// Another user from the same address is not blocked by alice's
	// failures (issue 27: behind a proxy every user shares one address).
	s.createUser("bob", domain.RoleView, "bobs password is long")
	require.Equal(t, http.StatusOK, s.login("bob", "bobs password is long").Code)
	// Nor the admin by failures for a user that does not exist.
	for range 5 {
		require.Equal(t, http.StatusUnauthorized, s.login("ghost", "wrong password!!").Code)
	}
	require.Equal(t, http.StatusTooManyRequests, s.login("ghost", "wrong password!!").Code)
	require.Equal(t, http.StatusOK, s.login("bob", "bobs password is long").Code)
	// After the window, logins work again.
	s.clock.Set(start.Add(2 * time.Minute))
	require.Equal(t, http.StatusOK, s.login("alice", alicePassword).Code)
}

func TestAPITokens(t *testing.T) {
	s := newStack(t)
	s.createUser("alice", domain.RoleEdit, alicePassword)
	s.createUser("bob", domain.RoleView, "bobs password is long")
	alice := s.sessionToken("alice", alicePassword)
	bob := s.sessionToken("bob", "bobs password is long")

	r := s.do(http.MethodPost, "/api/v1/apitokens", `{"metadata":{},"spec":{"description":"ci"}}`, bearer(alice)...)
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
	var created struct {
		Token    string              `json:"token"`
		Metadata domain.ObjectMeta   `json:"metadata"`
		Spec     domain.APITokenSpec `json:"spec"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &created))
	require.True(t, strings.HasPrefix(created.Token, identity.APITokenPrefix), created.Token)
	require.Equal(t, "alice", created.Spec.User)
	name := created.Metadata.Name
	require.True(t, strings.HasPrefix(name, "alice-"))

	// Shown once: never in a read, an event or a projection; stored only as a hash.
	// The token is rzt_<name>_<secret>; the secret may itself hold "_".
	secret := strings.TrimPrefix(created.Token, identity.APITokenPrefix+name+"_")
	require.NotEqual(t, created.Token, secret)
	got := s.do(http.MethodGet, "/api/v1/apitokens/"+name, nil, bearer(alice)...)
	require.Equal(t, http.StatusOK, got.Code)
	require.NotContains(t, string(got.Body), secret)
	require.NotContains(t, s.allStoredBytes(), secret)
	kv, err := s.env.Store.JetStream().KeyValue(context.Background(), eventstore.SecretsBucket)
	require.NoError(t, err)
	e, err := kv.Get(context.Background(), "apitoken."+name)
	require.NoError(t, err)
	require.NotContains(t, string(e.Value()), secret)

	who := s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(created.Token)...)
	require.JSONEq(t, `{"user":"alice","role":"edit","authMethod":"apitoken"}`, string(who.Body))
	require.Eventually(t, func() bool {
		return strings.Contains(string(s.do(http.MethodGet, "/api/v1/apitokens/"+name, nil).Body), `"lastUsed"`)
	}, 10*time.Second, 5*time.Millisecond)

	// Others' tokens are invisible to non-admins, and not theirs to make or delete.
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/apitokens/"+name, nil, bearer(bob)...).Code)
	require.NotContains(t, string(s.do(http.MethodGet, "/api/v1/apitokens", nil, bearer(bob)...).Body), name)
	require.Contains(t, string(s.do(http.MethodGet, "/api/v1/apitokens", nil).Body), name) // admin sees all
	require.Equal(t, http.StatusForbidden, s.do(http.MethodPost, "/api/v1/apitokens", `{"metadata":{"name":"sneaky"},"spec":{"user":"alice"}}`, bearer(bob)...).Code)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodDelete, "/api/v1/apitokens/"+name, nil, bearer(bob)...).Code)
	require.Equal(t, http.StatusUnprocessableEntity, s.do(http.MethodPatch, "/api/v1/apitokens/"+name, `{"spec":{"user":"bob"}}`, bearer(alice)...).Code)

	// Revoked: refused from the next request.
	require.Equal(t, http.StatusOK, s.do(http.MethodDelete, "/api/v1/apitokens/"+name, nil, bearer(alice)...).Code)
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(created.Token)...).Code)

	// Expired: refused once the clock passes expiresAt.
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r = s.do(http.MethodPost, "/api/v1/apitokens", `{"metadata":{"name":"short-lived"},"spec":{"expiresAt":"`+exp+`"}}`, bearer(alice)...)
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
	require.NoError(t, json.Unmarshal(r.Body, &created))
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(created.Token)...).Code)
	s.clock.Set(time.Now().Add(2 * time.Hour))
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(created.Token)...).Code)

	// Garbage that looks like a token is refused without a 500.
	for _, junk := range []string{"rzt_", "rzt_x", "rzt_Bad.Name_abc", "rzt_" + name + "_", "rzt_nope_abcdef"} {
		require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(junk)...).Code, junk)
	}
}

func TestBootstrapCreatesTheFirstAdminOnce(t *testing.T) {
	s := newStack(t)
	file := filepath.Join(t.TempDir(), "initial-admin-password")
	created, err := s.identity.Bootstrap(context.Background(), "", file)
	require.NoError(t, err)
	require.True(t, created)
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	pw, err := os.ReadFile(file)
	require.NoError(t, err)
	tok := s.sessionToken("admin", strings.TrimSpace(string(pw)))
	require.JSONEq(t, `{"user":"admin","role":"admin","authMethod":"session"}`,
		string(s.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(tok)...).Body))

	again, err := s.identity.Bootstrap(context.Background(), "", filepath.Join(t.TempDir(), "other"))
	require.NoError(t, err)
	require.False(t, again)

	// The signing key is generated, kept in the secrets bucket, and not empty.
	kv, err := s.env.Store.JetStream().KeyValue(context.Background(), eventstore.SecretsBucket)
	require.NoError(t, err)
	e, err := kv.Get(context.Background(), "session-signing-key")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(e.Value()), 32)
	_, err = kv.Get(context.Background(), "user-password.admin")
	require.NoError(t, err)
}

// TestTrustedProxiesNameTheClient: behind a trusted proxy the login limiter
// keys on the client X-Forwarded-For names; from anywhere else the header is
// the client's own word and is ignored.
func TestTrustedProxiesNameTheClient(t *testing.T) {
	loginFrom := func(s *stack, xff, name, password string) int {
		return s.do(http.MethodPost, "/api/v1/auth/login", fmt.Sprintf(`{"username":%q,"password":%q}`, name, password),
			"Authorization", "", "X-Forwarded-For", xff).Code
	}
	for _, tc := range []struct {
		name    string
		trusted string
		// the code of alice's right password from another client after
		// five failures from 203.0.113.5
		fromOther int
	}{
		{"behind the proxy", "127.0.0.0/8", http.StatusOK},
		{"no proxy trusted", "", http.StatusTooManyRequests},
		{"another proxy trusted", "10.0.0.0/8", http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, func(c *handlers.Config) {
				if tc.trusted != "" {
					_, n, err := net.ParseCIDR(tc.trusted)
					require.NoError(t, err)
					c.TrustedProxies = []*net.IPNet{n}
				}
			})
			s.clock.Set(time.Now())
			s.createUser("alice", domain.RoleView, alicePassword)
			for range 5 {
				require.Equal(t, http.StatusUnauthorized, loginFrom(s, "203.0.113.5", "alice", "wrong password!!"))
			}
			require.Equal(t, http.StatusTooManyRequests, loginFrom(s, "203.0.113.5", "alice", alicePassword))
			require.Equal(t, tc.fromOther, loginFrom(s, "203.0.113.6", "alice", alicePassword))
		})
	}
}
