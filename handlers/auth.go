package handlers

import (
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

const identityKey = "rezus.identity"

// authenticate rejects requests the Authenticator does not accept and records
// the identity for handlers and events.
func (a *API) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a.auth == nil {
			return domain.NewUnauthorized("no authenticator is configured")
		}
		id, err := a.auth.Authenticate(c.Request())
		if err != nil {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="rezuscloud"`)
			return err
		}
		c.Set(identityKey, id)
		if err := checkIdempotencyKey(c); err != nil {
			return err
		}
		return next(c)
	}
}

func identityOf(c echo.Context) identity.Identity {
	id, _ := c.Get(identityKey).(identity.Identity)
	return id
}
