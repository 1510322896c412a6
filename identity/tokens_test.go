package identity_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
)

func TestTokenLastUsed(t *testing.T) {
	e := newEnv(t, func(c *identity.Config) { c.TokenUseInterval = time.Minute })
	e.user("ann", domain.UserSpec{Role: domain.RoleView}, "")
	e.create(domain.APITokenKind, "ci", domain.APITokenSpec{User: "ann"})
	tok, err := e.svc.IssueAPIToken(t.Context(), "ci", "ann")
	require.NoError(t, err)
	lastUsed := func() *time.Time {
		require.NoError(t, e.cache.Sync(t.Context()))
		tk, ok, err := projections.Get[domain.APIToken](e.cache, domain.ObjectRef(domain.APITokenKind, "", "ci"))
		require.NoError(t, err)
		require.True(t, ok)
		return tk.Status.LastUsed
	}
	first := e.clock.Now()
	_, err = e.svc.Authenticate(bearerRequest(tok))
	require.NoError(t, err)
	require.Eventually(t, func() bool { u := lastUsed(); return u != nil && u.Equal(first) }, 10*time.Second, 10*time.Millisecond)

	e.clock.Add(30 * time.Second)
	_, err = e.svc.Authenticate(bearerRequest(tok))
	require.NoError(t, err)
	require.True(t, lastUsed().Equal(first), "not written again within the interval")

	e.clock.Add(31 * time.Second)
	_, err = e.svc.Authenticate(bearerRequest(tok))
	require.NoError(t, err)
	want := e.clock.Now()
	require.Eventually(t, func() bool { u := lastUsed(); return u != nil && u.Equal(want) }, 10*time.Second, 10*time.Millisecond)
}

// TestTokenOfAnEarlierUser: a token whose stored owner uid is not the
// user's now (the user was deleted and created again) is refused, and so
// is one stored without a uid that is older than its user.
func TestTokenOfAnEarlierUser(t *testing.T) {
	plain := func(t *testing.T, e *env) *eventstore.Secrets {
		s, err := eventstore.OpenSecrets(t.Context(), e.store)
		require.NoError(t, err)
		return s
	}
	for _, tc := range []struct {
		name string
		// record is what the secrets store holds for the token, given its hash.
		record func(hash, uid string) string
		// userFirst makes the user before the token (else after).
		userFirst bool
		ok        bool
	}{
		{"with the owner's uid", func(h, uid string) string { return h + ":" + uid }, true, true},
		{"with an earlier user's uid", func(h, _ string) string { return h + ":not-the-uid" }, true, false},
		{"without a uid, younger than its user", func(h, _ string) string { return h }, true, true},
		{"without a uid, older than its user", func(h, _ string) string { return h }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.userFirst {
				e.user("ann", domain.UserSpec{Role: domain.RoleView}, "")
				e.clock.Add(time.Second)
				e.create(domain.APITokenKind, "ci", domain.APITokenSpec{User: "ann"})
			} else {
				e.create(domain.APITokenKind, "ci", domain.APITokenSpec{User: "ann"})
				e.clock.Add(time.Second)
				e.user("ann", domain.UserSpec{Role: domain.RoleView}, "")
			}
			u, ok, err := projections.Get[domain.User](e.cache, domain.ObjectRef(domain.UserKind, "", "ann"))
			require.NoError(t, err)
			require.True(t, ok)
			secret := "legacy-secret-0123456789"
			sum := sha256.Sum256([]byte(secret))
			require.NoError(t, plain(t, e).Put(t.Context(), "apitoken.ci", []byte(tc.record(hex.EncodeToString(sum[:]), u.Metadata.UID))))
			_, err = e.svc.Authenticate(bearerRequest(identity.APITokenPrefix + "ci_" + secret))
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)
		})
	}
}
