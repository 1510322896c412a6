package handlers_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestCurrentPasswordCheckIsRateLimited (issue 42, finding 10): the current
// password of PUT /users/{u}/password goes through the login limiter, its
// failures counted with failed logins: with a session (or a token) of the
// user, an attacker guessing the password behind it is held back like one
// guessing at the login form, until the window passes (an injected clock).
func TestCurrentPasswordCheckIsRateLimited(t *testing.T) {
	s := newStack(t)
	start := time.Now()
	s.clock.Set(start)
	s.createUser("alice", domain.RoleEdit, alicePassword)
	tok := s.sessionToken("alice", alicePassword)
	change := func(current string) response {
		body := fmt.Sprintf(`{"password":"a brand new password","currentPassword":%q,"keepAPITokens":true}`, current)
		return s.do(http.MethodPut, "/api/v1/users/alice/password", body, bearer(tok)...)
	}

	// Two failed logins and three wrong current passwords: five failures.
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, s.login("alice", "wrong password!!").Code)
	}
	for i := range 3 {
		r := change(fmt.Sprintf("guess number %d", i))
		require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
		require.Equal(t, "currentPassword", r.status(t).Details.Causes[0].Field)
	}
	blocked := change(alicePassword)
	require.Equal(t, http.StatusTooManyRequests, blocked.Code, "the right password is refused while held back: %s", blocked.Body)
	require.Equal(t, domain.ReasonTooManyRequests, blocked.status(t).Reason)
	require.NotEmpty(t, blocked.Header.Get("Retry-After"))
	require.Equal(t, http.StatusTooManyRequests, s.login("alice", alicePassword).Code, "counted with logins")

	// After the window the right password changes it.
	s.clock.Set(start.Add(2 * time.Minute))
	r := change(alicePassword)
	require.Equal(t, http.StatusNoContent, r.Code, string(r.Body))
	require.Equal(t, http.StatusOK, s.login("alice", "a brand new password").Code)
}
