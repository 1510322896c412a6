package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// createToken makes an API token as the bearer and returns its secret and name.
func (s *stack) createToken(body string, auth ...string) (token, name string) {
	s.t.Helper()
	r := s.do(http.MethodPost, "/api/v1/apitokens", body, auth...)
	require.Equal(s.t, http.StatusCreated, r.Code, string(r.Body))
	var created struct {
		Token    string            `json:"token"`
		Metadata domain.ObjectMeta `json:"metadata"`
	}
	require.NoError(s.t, json.Unmarshal(r.Body, &created))
	return created.Token, created.Metadata.Name
}

func (s *stack) whoami(auth ...string) response {
	s.t.Helper()
	return s.do(http.MethodGet, "/api/v1/auth/whoami", nil, auth...)
}

// Issue 13, defect 1: a deleted user's sessions and tokens must not come back
// when a user of the same name is created again (with another role).
func TestDeletedUserCredentialsStayDeadWhenTheNameIsReused(t *testing.T) {
	s := newStack(t)
	s.createUser("alice", domain.RoleAdmin, alicePassword)
	sess := s.sessionToken("alice", alicePassword)
	tok, tokName := s.createToken(`{"metadata":{},"spec":{"description":"ci"}}`, bearer(sess)...)
	require.Equal(t, http.StatusOK, s.whoami(bearer(tok)...).Code)

	require.Equal(t, http.StatusOK, s.do(http.MethodDelete, "/api/v1/users/alice", nil).Code)
	// Deleting the user deletes its tokens.
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/apitokens/"+tokName, nil).Code)

	s.createUser("alice", domain.RoleView, alicePassword)
	require.Equal(t, http.StatusUnauthorized, s.whoami(bearer(sess)...).Code, "the old session came back")
	require.Equal(t, http.StatusUnauthorized, s.whoami(bearer(tok)...).Code, "the old token came back")
	// The new alice works with her own new credentials.
	fresh := s.sessionToken("alice", alicePassword)
	require.JSONEq(t, `{"user":"alice","role":"view","authMethod":"session"}`, string(s.whoami(bearer(fresh)...).Body))
}

// Issue 13, defect 2: a password change or reset ends the user's other sessions.
// The self-service change keeps the session that made it. Issue 27: and the
// user's API tokens, unless the change keeps them explicitly.
func TestPasswordChangeEndsSessions(t *testing.T) {
	s := newStack(t)
	s.createUser("alice", domain.RoleView, alicePassword)
	mine := s.sessionToken("alice", alicePassword)
	other := s.sessionToken("alice", alicePassword)
	tok, _ := s.createToken(`{"metadata":{},"spec":{}}`, bearer(mine)...)

	r := s.do(http.MethodPut, "/api/v1/users/alice/password",
		`{"password":"a brand new password","currentPassword":"`+alicePassword+`","keepAPITokens":true}`, bearer(mine)...)
	require.Equal(t, http.StatusNoContent, r.Code, string(r.Body))
	require.Equal(t, http.StatusUnauthorized, s.whoami(bearer(other)...).Code, "another session survived the change")
	require.Equal(t, http.StatusOK, s.whoami(bearer(mine)...).Code, "the changing session ended")
	require.Equal(t, http.StatusOK, s.whoami(bearer(tok)...).Code, "keepAPITokens: the token stays")

	// Issue 27, finding 9: by default a password change ends the user's API
	// tokens too; tokens an attacker made must not survive the reset.
	r = s.do(http.MethodPut, "/api/v1/users/alice/password",
		`{"password":"a third new password","currentPassword":"a brand new password"}`, bearer(mine)...)
	require.Equal(t, http.StatusNoContent, r.Code, string(r.Body))
	require.Equal(t, http.StatusUnauthorized, s.whoami(bearer(tok)...).Code, "the API token survived the password change")
	require.Equal(t, http.StatusOK, s.whoami(bearer(mine)...).Code)
	list := s.do(http.MethodGet, "/api/v1/apitokens", nil, bearer(mine)...)
	require.NotContains(t, string(list.Body), `"user":"alice"`, "the token objects are gone with them")
	tok2, _ := s.createToken(`{"metadata":{},"spec":{}}`, bearer(mine)...)

	// An admin's reset ends every session, through either route.
	require.Equal(t, http.StatusNoContent, s.do(http.MethodPut, "/api/v1/users/alice/password", `{"password":"admin resets alice"}`).Code)
	require.Equal(t, http.StatusUnauthorized, s.whoami(bearer(mine)...).Code)
	again := s.sessionToken("alice", "admin resets alice")
	require.Equal(t, http.StatusUnauthorized, s.whoami(bearer(tok2)...).Code, "an admin's reset ends the tokens")
	tok3, _ := s.createToken(`{"metadata":{},"spec":{}}`, bearer(again)...)
	require.Equal(t, http.StatusOK, s.do(http.MethodPatch, "/api/v1/users/alice", `{"spec":{"password":"patched by the admin"}}`).Code)
	require.Equal(t, http.StatusUnauthorized, s.whoami(bearer(again)...).Code)
	require.Equal(t, http.StatusUnauthorized, s.whoami(bearer(tok3)...).Code, "a reset through the user object ends the tokens")
	require.Equal(t, http.StatusOK, s.whoami(bearer(s.sessionToken("alice", "patched by the admin"))...).Code)
}

// Issue 13, defect 10: tokens per user are capped, descriptions are bounded,
// and self-service token writes are rate limited.
func TestTokenQuotaDescriptionAndWriteRate(t *testing.T) {
	s := newStackWith(t, func(c *identity.Config) {
		c.MaxTokensPerUser = 3
		c.TokenWriteBurst = 5
		c.TokenWriteInterval = 10 * time.Second
	})
	start := time.Now()
	s.clock.Set(start)
	s.createUser("bob", domain.RoleView, "bobs password is long")
	bob := s.sessionToken("bob", "bobs password is long")

	long := s.do(http.MethodPost, "/api/v1/apitokens", `{"metadata":{},"spec":{"description":"`+strings.Repeat("x", 1025)+`"}}`, bearer(bob)...)
	require.Equal(t, http.StatusUnprocessableEntity, long.Code, string(long.Body))
	require.Contains(t, string(long.Body), `"field":"spec.description"`)

	names := make([]string, 0, 3)
	for range 3 {
		_, n := s.createToken(`{"metadata":{},"spec":{"description":"`+strings.Repeat("y", 1024)+`"}}`, bearer(bob)...)
		names = append(names, n)
	}
	over := s.do(http.MethodPost, "/api/v1/apitokens", `{"metadata":{},"spec":{}}`, bearer(bob)...)
	require.Equal(t, http.StatusForbidden, over.Code, string(over.Body))
	require.Contains(t, over.status(t).Message, "3 API tokens")

	patch := s.do(http.MethodPatch, "/api/v1/apitokens/"+names[0], `{"spec":{"description":"`+strings.Repeat("z", 1025)+`"}}`, bearer(bob)...)
	require.Equal(t, http.StatusUnprocessableEntity, patch.Code, string(patch.Body))
	require.Contains(t, string(patch.Body), `"field":"spec.description"`)

	// Refused writes do not spend the burst (5): the three creations spent
	// three, so two more writes pass and the next is limited.
	for i := range 2 {
		r := s.do(http.MethodPatch, "/api/v1/apitokens/"+names[0], fmt.Sprintf(`{"spec":{"description":"d%d"}}`, i), bearer(bob)...)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	}
	limited := s.do(http.MethodPatch, "/api/v1/apitokens/"+names[0], `{"spec":{"description":"flood"}}`, bearer(bob)...)
	require.Equal(t, http.StatusTooManyRequests, limited.Code, string(limited.Body))
	require.Equal(t, "10", limited.Header.Get("Retry-After"))
	// Revoking is never limited.
	require.Equal(t, http.StatusOK, s.do(http.MethodDelete, "/api/v1/apitokens/"+names[2], nil, bearer(bob)...).Code)
	// The admin is not limited, and the bucket refills with time.
	require.Equal(t, http.StatusOK, s.do(http.MethodPatch, "/api/v1/apitokens/"+names[0], `{"spec":{"description":"admin"}}`).Code)
	s.clock.Set(start.Add(10 * time.Second))
	require.Equal(t, http.StatusOK, s.do(http.MethodPatch, "/api/v1/apitokens/"+names[0], `{"spec":{"description":"later"}}`, bearer(bob)...).Code)
}

// Issue 13, defect 12: failed logins from one address must not lock the user
// out: the right password from an address with no failures still logs in.
func TestFailedLoginsDoNotLockTheUserOut(t *testing.T) {
	s := newStack(t)
	start := time.Now()
	s.clock.Set(start)
	s.createUser("admin2", domain.RoleAdmin, alicePassword)
	ctx := context.Background()
	for range 8 {
		_, _, _, err := s.identity.Login(ctx, "admin2", "wrong password!!", "203.0.113.7")
		require.Error(t, err)
	}
	// The attacker's address is blocked, even with the right password.
	_, _, _, err := s.identity.Login(ctx, "admin2", alicePassword, "203.0.113.7")
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.ReasonTooManyRequests, de.Reason)
	// The real admin, from a clean address, passes the user's delay.
	_, _, id, err := s.identity.Login(ctx, "admin2", alicePassword, "198.51.100.1")
	require.NoError(t, err)
	require.Equal(t, "admin2", id.Name)
	// A wrong password from a fresh address is a plain 401 and marks that address.
	_, _, _, err = s.identity.Login(ctx, "admin2", "wrong password!!", "198.51.100.2")
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.ReasonUnauthorized, de.Reason)
	for range 4 {
		_, _, _, _ = s.identity.Login(ctx, "admin2", "wrong password!!", "198.51.100.9")
	}
	_, _, _, err = s.identity.Login(ctx, "admin2", alicePassword, "198.51.100.2")
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.ReasonTooManyRequests, de.Reason, "an address with failures waits out the user's delay")
}
