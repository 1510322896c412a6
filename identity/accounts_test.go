package identity_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

func TestProviderCredentials(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		data   map[string]string
		fields []string
	}{
		{"nothing", map[string]string{}, []string{"data"}},
		{"a lower-case name", map[string]string{"os_password": "x"}, []string{"data[os_password]"}},
		{"the runner's", map[string]string{"PATH": "/tmp", "TF_VAR_x": "1", "LD_PRELOAD": "/x.so", "REZUSCLOUD_ADMIN_TOKEN": "t"},
			[]string{"data[PATH]", "data[TF_VAR_x]", "data[LD_PRELOAD]", "data[REZUSCLOUD_ADMIN_TOKEN]"}},
		{"a NUL byte", map[string]string{"OS_PASSWORD": "a\x00b"}, []string{"data[OS_PASSWORD]"}},
		{"too long a value", map[string]string{"OS_PASSWORD": strings.Repeat("x", identity.MaxCredentialValueBytes+1)}, []string{"data[OS_PASSWORD]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.PutProviderCredentials(ctx, "oci-prod", tc.data)
			var de *domain.Error
			require.ErrorAs(t, err, &de)
			var got []string
			for _, c := range de.Causes {
				got = append(got, c.Field)
			}
			require.ElementsMatch(t, tc.fields, got, "%v", de.Causes)
		})
	}
	created, err := e.svc.PutProviderCredentials(ctx, "oci-prod", map[string]string{"OS_PASSWORD": "s3cret"})
	require.NoError(t, err)
	require.True(t, created)
	created, err = e.svc.PutProviderCredentials(ctx, "oci-prod", map[string]string{"OS_PASSWORD": "n3w", "OS_USERNAME": "ops"})
	require.NoError(t, err)
	require.False(t, created, "replaced")
	got, err := e.svc.ProviderCredentials(ctx, "oci-prod")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"OS_PASSWORD": "n3w", "OS_USERNAME": "ops"}, got)
	require.NoError(t, e.svc.DeleteProviderCredentials(ctx, "oci-prod"))
	_, err = e.svc.ProviderCredentials(ctx, "oci-prod")
	require.Equal(t, domain.ReasonNotFound, domain.ReasonOf(err))
	require.Equal(t, domain.ReasonNotFound, domain.ReasonOf(e.svc.DeleteProviderCredentials(ctx, "oci-prod")))
}

func TestBootstrap(t *testing.T) {
	e := newEnv(t)
	e.svc.ExpectBootstrap()
	require.False(t, e.svc.Ready(), "not ready before the first admin exists")
	file := filepath.Join(t.TempDir(), "initial-admin-password")
	created, err := e.svc.Bootstrap(t.Context(), "", file)
	require.NoError(t, err)
	require.True(t, created)
	require.True(t, e.svc.Ready())
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	ok, err := e.svc.CheckPassword(t.Context(), "admin", strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	require.True(t, ok, "the generated password is the admin's")

	created, err = e.svc.Bootstrap(t.Context(), "another password entirely", "")
	require.NoError(t, err)
	require.False(t, created, "once: there are users now")
	ok, err = e.svc.CheckPassword(t.Context(), "admin", "another password entirely")
	require.NoError(t, err)
	require.False(t, ok)

	short := newEnv(t)
	_, err = short.svc.Bootstrap(t.Context(), "short", "")
	require.Equal(t, domain.ReasonInvalid, domain.ReasonOf(err), "a given password follows the policy: %v", err)
}

func TestPasswords(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name, password string
		reason         domain.Reason
	}{
		{"long enough", "twelve chars", ""},
		{"too short", "eleven char", domain.ReasonInvalid},
		{"past bcrypt's 72 bytes", strings.Repeat("p", 73), domain.ReasonInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := e.svc.SetPassword(ctx, "ann", tc.password)
			if tc.reason != "" {
				require.Equal(t, tc.reason, domain.ReasonOf(err), "%v", err)
				return
			}
			require.NoError(t, err)
			ok, err := e.svc.CheckPassword(ctx, "ann", tc.password)
			require.NoError(t, err)
			require.True(t, ok)
		})
	}
	ok, err := e.svc.CheckPassword(ctx, "ann", "twelve charz")
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = e.svc.CheckPassword(ctx, "nobody", "twelve chars")
	require.NoError(t, err)
	require.False(t, ok, "an unknown user has no password")
	require.NoError(t, e.svc.DeletePassword(ctx, "ann"))
	ok, err = e.svc.CheckPassword(ctx, "ann", "twelve chars")
	require.NoError(t, err)
	require.False(t, ok)
}

func TestTokenWritesAreRateLimited(t *testing.T) {
	e := newEnv(t, func(c *identity.Config) { c.TokenWriteBurst, c.TokenWriteInterval = 2, time.Minute })
	require.NoError(t, e.svc.AllowTokenWrite("ann"))
	require.NoError(t, e.svc.AllowTokenWrite("ann"))
	err := e.svc.AllowTokenWrite("ann")
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.ReasonTooManyRequests, de.Reason)
	require.Equal(t, 60, de.RetryAfterSeconds)
	require.NoError(t, e.svc.AllowTokenWrite("bea"), "per user")
	e.clock.Add(time.Minute)
	require.NoError(t, e.svc.AllowTokenWrite("ann"), "refilled")
}

func TestIssueAPITokenNeedsItsOwner(t *testing.T) {
	e := newEnv(t)
	_, err := e.svc.IssueAPIToken(t.Context(), "ci", "nobody")
	require.Equal(t, domain.ReasonInvalid, domain.ReasonOf(err), "%v", err)
	e.user("ann", domain.UserSpec{Role: domain.RoleView}, "")
	tok, err := e.svc.IssueAPIToken(t.Context(), "ci", "ann")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(tok, identity.APITokenPrefix+"ci_"))
	require.Equal(t, 50, e.svc.MaxTokensPerUser())
}

// TestEndSessions ends every session of one user, but the one kept, and
// none of another user's.
func TestEndSessions(t *testing.T) {
	e := newEnv(t)
	e.user("ann", domain.UserSpec{Role: domain.RoleView}, pw)
	e.user("bea", domain.UserSpec{Role: domain.RoleView}, pw)
	var anns, beas []string
	for range 12 {
		tok, err := e.login("ann", pw)
		require.NoError(t, err)
		anns = append(anns, tok)
	}
	for range 4 {
		tok, err := e.login("bea", pw)
		require.NoError(t, err)
		beas = append(beas, tok)
	}
	keep := mustID(t, e, anns[5])
	require.NoError(t, e.svc.EndSessions(t.Context(), "ann", keep))
	for i, tok := range anns {
		_, err := e.svc.Authenticate(bearerRequest(tok))
		if i == 5 {
			require.NoError(t, err, "the session kept")
			continue
		}
		require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "session %d", i)
	}
	for i, tok := range beas {
		_, err := e.svc.Authenticate(bearerRequest(tok))
		require.NoError(t, err, "bea's session %d", i)
	}
	require.NoError(t, e.svc.EndSessions(t.Context(), "ann", ""))
	_, err := e.svc.Authenticate(bearerRequest(anns[5]))
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err))
}

// TestRevokeTokens deletes every token of the user, objects and secrets.
func TestRevokeTokens(t *testing.T) {
	e := newEnv(t)
	e.user("ann", domain.UserSpec{Role: domain.RoleView}, "")
	e.user("bea", domain.UserSpec{Role: domain.RoleView}, "")
	toks := map[string]string{}
	for _, n := range []string{"a1", "a2", "b1"} {
		owner := "ann"
		if n == "b1" {
			owner = "bea"
		}
		e.create(domain.APITokenKind, n, domain.APITokenSpec{User: owner})
		tok, err := e.svc.IssueAPIToken(t.Context(), n, owner)
		require.NoError(t, err)
		toks[n] = tok
	}
	require.Equal(t, 2, e.svc.TokenCount("ann"))
	require.NoError(t, e.svc.RevokeTokens(t.Context(), "ann", "admin", "corr"))
	require.NoError(t, e.cache.Sync(t.Context()))
	require.Zero(t, e.svc.TokenCount("ann"))
	require.Equal(t, 1, e.svc.TokenCount("bea"))
	for n, tok := range toks {
		_, err := e.svc.Authenticate(bearerRequest(tok))
		if n == "b1" {
			require.NoError(t, err)
			continue
		}
		require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), n)
	}
}

// TestLogout ends the session a request carries, by header or cookie; a
// request without one, or with a forged one, ends nothing and is no error.
func TestLogout(t *testing.T) {
	e := newEnv(t)
	e.user("ann", domain.UserSpec{Role: domain.RoleView}, pw)
	byHeader, _ := e.login("ann", pw)
	byCookie, _ := e.login("ann", pw)
	other, _ := e.login("ann", pw)

	require.NoError(t, e.svc.Logout(t.Context(), bearerRequest(byHeader)))
	r := bearerRequest("")
	r.AddCookie(&http.Cookie{Name: identity.SessionCookie, Value: byCookie})
	require.NoError(t, e.svc.Logout(t.Context(), r))
	require.NoError(t, e.svc.Logout(t.Context(), bearerRequest("")))
	require.NoError(t, e.svc.Logout(t.Context(), bearerRequest("not.a.session")))
	for _, tok := range []string{byHeader, byCookie} {
		_, err := e.svc.Authenticate(bearerRequest(tok))
		require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err))
	}
	_, err := e.svc.Authenticate(bearerRequest(other))
	require.NoError(t, err, "the user's other session stays")
}
