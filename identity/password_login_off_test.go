package identity_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// TestPasswordSessionEndsWithPasswordLogin (issue 42, finding 9): a session
// of a password login is refused by a server (a restart on the same data)
// whose password logins are off, and stays ended when they are on again.
func TestPasswordSessionEndsWithPasswordLogin(t *testing.T) {
	e := newEnv(t)
	e.user("ivy", domain.UserSpec{Role: domain.RoleView}, "ivy's long password")
	tok, err := e.login("ivy", "ivy's long password")
	require.NoError(t, err)
	_, err = e.svc.Authenticate(bearerRequest(tok))
	require.NoError(t, err)

	off, err := identity.NewService(t.Context(), identity.Config{PasswordCost: bcrypt.MinCost, Now: e.clock.Now, DisablePasswordLogin: true}, e.store, e.cache)
	require.NoError(t, err)
	_, err = off.Authenticate(bearerRequest(tok))
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)
	require.ErrorContains(t, err, "password login is disabled")
	_, err = e.svc.Authenticate(bearerRequest(tok))
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "the session stays ended: %v", err)
}
