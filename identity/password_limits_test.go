package identity_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// TestCurrentPasswordThroughTheLimiter (issue 42, finding 10): wrong
// current passwords count with failed logins, and once the limiter's
// threshold is reached the right one is refused (TooManyRequests) until
// the window passes.
func TestCurrentPasswordThroughTheLimiter(t *testing.T) {
	e := newEnv(t, func(c *identity.Config) { c.LoginFailures, c.LoginWindow = 3, time.Minute })
	e.user("jo", domain.UserSpec{Role: domain.RoleView}, "jo's long password")
	const addr = "192.0.2.1" // e.login's
	_, err := e.login("jo", "not jo's password")
	require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err))
	for range 2 {
		err := e.svc.CheckCurrentPassword(t.Context(), "jo", "a guess at it", addr, "currentPassword")
		require.Equal(t, domain.ReasonInvalid, domain.ReasonOf(err), "%v", err)
	}
	err = e.svc.CheckCurrentPassword(t.Context(), "jo", "jo's long password", addr, "currentPassword")
	require.Equal(t, domain.ReasonTooManyRequests, domain.ReasonOf(err), "%v", err)
	_, err = e.login("jo", "jo's long password")
	require.Equal(t, domain.ReasonTooManyRequests, domain.ReasonOf(err), "counted with logins: %v", err)

	e.clock.Add(time.Minute)
	require.NoError(t, e.svc.CheckCurrentPassword(t.Context(), "jo", "jo's long password", addr, "currentPassword"))
}
