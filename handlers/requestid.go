package handlers

import (
	"strings"

	"github.com/labstack/echo/v4"
)

const (
	// clientRequestIDHeader answers the client's own X-Request-Id back,
	// sanitised, next to the server's.
	clientRequestIDHeader = "X-Client-Request-Id"
	// MaxClientRequestID bounds the client's request id kept for a request.
	MaxClientRequestID = 128
	clientRequestIDKey = "rezus.clientRequestId"
)

// requestID gives every request an id of the server's making, answered as
// X-Request-Id and recorded as the audit record's requestId and the events'
// correlationId. A client's X-Request-Id is never taken for it (a client
// could otherwise forge or collide another request's trail): it is kept
// apart, printable ASCII only and bounded (see clientRequestID), and answered
// back as X-Client-Request-Id.
func (a *API) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderXRequestID, a.cfg.NewUID())
		if id := sanitizeClientRequestID(c.Request().Header.Get(echo.HeaderXRequestID)); id != "" {
			c.Set(clientRequestIDKey, id)
			c.Response().Header().Set(clientRequestIDHeader, id)
		}
		return next(c)
	}
}

// clientRequestID is the client's own X-Request-Id, sanitised; "" when it
// sent none.
func clientRequestID(c echo.Context) string {
	id, _ := c.Get(clientRequestIDKey).(string)
	return id
}

// sanitizeClientRequestID keeps the printable ASCII of id, without blanks,
// and at most MaxClientRequestID bytes of it.
func sanitizeClientRequestID(id string) string {
	var b strings.Builder
	for i := 0; i < len(id) && b.Len() < MaxClientRequestID; i++ {
		if ch := id[i]; ch > 0x20 && ch < 0x7f {
			b.WriteByte(ch)
		}
	}
	return b.String()
}

// correlationID is the id the events a request causes carry: the server's
// request id, never one the client chose.
func correlationID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}
