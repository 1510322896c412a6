package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// errorHandler is echo's HTTPErrorHandler and the one place an error becomes
// an answer: handlers and middleware return errors, and every one leaves as a
// Kubernetes Status with the matching HTTP code. Internal errors are logged
// with the request and sent with a generic message. A response already
// committed (a stream that has begun) is left as it is: its status is sent.
func (a *API) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	de := asDomainError(err)
	if de.Reason == domain.ReasonInternalError {
		a.log.Error("request failed", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err,
			"requestId", c.Response().Header().Get(echo.HeaderXRequestID), "clientRequestId", clientRequestID(c))
		de = &domain.Error{Reason: domain.ReasonInternalError, Message: "internal error; see the server log"}
	}
	st := domain.StatusOf(de)
	if de.RetryAfterSeconds > 0 {
		c.Response().Header().Set("Retry-After", fmt.Sprint(de.RetryAfterSeconds))
	}
	_ = c.JSON(st.Code, st)
}

// toDomainError maps echo's and the standard library's errors onto the vocabulary.
func toDomainError(err error) *domain.Error {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := fmt.Sprint(he.Message)
		switch he.Code {
		case http.StatusNotFound:
			return &domain.Error{Reason: domain.ReasonNotFound, Message: "the server could not find the requested resource"}
		case http.StatusMethodNotAllowed:
			return &domain.Error{Reason: domain.ReasonMethodNotAllowed, Message: "the server does not allow this method on the requested resource"}
		case http.StatusRequestEntityTooLarge:
			return &domain.Error{Reason: domain.ReasonRequestEntityTooLarge, Message: "request body too large"}
		case http.StatusUnauthorized:
			return domain.NewUnauthorized(strings.ToLower(msg))
		case http.StatusBadRequest:
			return domain.NewBadRequest(strings.ToLower(msg))
		case http.StatusServiceUnavailable:
			return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: strings.ToLower(msg)}
		}
		if he.Code < 500 {
			return &domain.Error{Reason: domain.ReasonBadRequest, Message: strings.ToLower(msg)}
		}
	}
	// This replica's connection to NATS is closing (a lame duck stopping):
	// another replica answers, so the client retries rather than fails.
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, RetryAfterSeconds: 1,
			Message: "this replica is stopping; retry (another replica answers)"}
	}
	// A read found the stream without a leader (an election during a
	// rolling restart): nothing was written, the client retries.
	var noLeader *eventstore.NoLeaderError
	if errors.As(err, &noLeader) {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, RetryAfterSeconds: 1,
			Message: "the data store is electing a leader; retry"}
	}
	return domain.NewInternal(err)
}

// asDomainError is err in the error vocabulary: the *domain.Error it wraps,
// or what echo's and the standard library's errors map to.
func asDomainError(err error) *domain.Error {
	var de *domain.Error
	if errors.As(err, &de) {
		return de
	}
	return toDomainError(err)
}

// statusCodeOf is the HTTP code errorHandler will send for err, for the
// middleware (audit, metrics) that records it before the handler runs.
func statusCodeOf(err error) int { return asDomainError(err).Reason.Code() }
