package domain

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Reason is a machine-readable explanation of a failure, as in a Kubernetes Status.
type Reason string

// The reasons the API uses; each maps to one HTTP code (see Reason.Code).
const (
	ReasonNotFound              Reason = "NotFound"
	ReasonAlreadyExists         Reason = "AlreadyExists"
	ReasonConflict              Reason = "Conflict"
	ReasonInvalid               Reason = "Invalid"
	ReasonBadRequest            Reason = "BadRequest"
	ReasonUnauthorized          Reason = "Unauthorized"
	ReasonForbidden             Reason = "Forbidden"
	ReasonGone                  Reason = "Gone"
	ReasonRequestEntityTooLarge Reason = "RequestEntityTooLarge"
	ReasonTooManyRequests       Reason = "TooManyRequests"
	ReasonMethodNotAllowed      Reason = "MethodNotAllowed"
	ReasonUnsupportedMediaType  Reason = "UnsupportedMediaType"
	ReasonServiceUnavailable    Reason = "ServiceUnavailable"
	ReasonTimeout               Reason = "Timeout"
	ReasonInternalError         Reason = "InternalError"
)

// Code is the HTTP status code that goes with the reason.
func (r Reason) Code() int {
	switch r {
	case ReasonNotFound:
		return http.StatusNotFound
	case ReasonAlreadyExists, ReasonConflict:
		return http.StatusConflict
	case ReasonInvalid:
		return http.StatusUnprocessableEntity
	case ReasonBadRequest:
		return http.StatusBadRequest
	case ReasonUnauthorized:
		return http.StatusUnauthorized
	case ReasonForbidden:
		return http.StatusForbidden
	case ReasonGone:
		return http.StatusGone
	case ReasonRequestEntityTooLarge:
		return http.StatusRequestEntityTooLarge
	case ReasonTooManyRequests:
		return http.StatusTooManyRequests
	case ReasonMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case ReasonUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case ReasonServiceUnavailable:
		return http.StatusServiceUnavailable
	case ReasonTimeout:
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

// Cause names one field at fault and what is wrong with it.
type Cause struct {
	// Field is the JSON path of the field, e.g. "spec.count" or "spec.network.podSubnets[1]".
	Field string `json:"field,omitempty"`
	// Message says what is wrong, lower-case, without the field name.
	Message string `json:"message"`
	// Type is the kind of failure (FieldValueInvalid, FieldValueRequired, ...), as Kubernetes names it.
	Type string `json:"reason,omitempty"`
}

// Cause types, as Kubernetes names them.
const (
	CauseInvalid      = "FieldValueInvalid"
	CauseRequired     = "FieldValueRequired"
	CauseNotSupported = "FieldValueNotSupported"
	CauseDuplicate    = "FieldValueDuplicate"
	CauseTooLong      = "FieldValueTooLong"
	CauseUnknownField = "FieldValueUnknown"
	CauseTypeInvalid  = "FieldValueTypeInvalid"
	CauseForbidden    = "FieldValueForbidden"
	CauseNotFound     = "FieldValueNotFound"
)

// Error is the one error vocabulary of the project. It carries what a Kubernetes
// Status needs: a reason, a message, the object it is about and field causes.
type Error struct {
	Reason  Reason
	Message string
	Kind    string
	Name    string
	Causes  []Cause
	// RetryAfterSeconds is set on TooManyRequests and ServiceUnavailable answers.
	RetryAfterSeconds int
}

func (e *Error) Error() string { return e.Message }

// NewNotFound says the named object does not exist.
func NewNotFound(kind, name string) *Error {
	return &Error{Reason: ReasonNotFound, Kind: kind, Name: name, Message: fmt.Sprintf("%s %q not found", strings.ToLower(kind), name)}
}

// NewAlreadyExists says an object with that name exists.
func NewAlreadyExists(kind, name string) *Error {
	return &Error{Reason: ReasonAlreadyExists, Kind: kind, Name: name, Message: fmt.Sprintf("%s %q already exists", strings.ToLower(kind), name)}
}

// NewConflict says the write was based on a stale version of the object.
func NewConflict(kind, name, why string) *Error {
	return &Error{Reason: ReasonConflict, Kind: kind, Name: name,
		Message: fmt.Sprintf("operation cannot be fulfilled on %s %q: %s", strings.ToLower(kind), name, why)}
}

// NewInvalid reports every bad field of an object at once.
func NewInvalid(kind, name string, causes []Cause) *Error {
	parts := make([]string, 0, len(causes))
	for _, c := range causes {
		if c.Field != "" {
			parts = append(parts, c.Field+": "+c.Message)
		} else {
			parts = append(parts, c.Message)
		}
	}
	return &Error{Reason: ReasonInvalid, Kind: kind, Name: name, Causes: causes,
		Message: fmt.Sprintf("%s %q is invalid: %s", strings.ToLower(kind), name, strings.Join(parts, "; "))}
}

// NewBadRequest says the request itself could not be understood.
func NewBadRequest(msg string, causes ...Cause) *Error {
	return &Error{Reason: ReasonBadRequest, Message: msg, Causes: causes}
}

// NewForbidden says the caller may not do this, or the object's state forbids it.
func NewForbidden(kind, name, why string) *Error {
	return &Error{Reason: ReasonForbidden, Kind: kind, Name: name,
		Message: fmt.Sprintf("%s %q is forbidden: %s", strings.ToLower(kind), name, why)}
}

// NewGone says the requested version is no longer available.
func NewGone(msg string) *Error { return &Error{Reason: ReasonGone, Message: msg} }

// NewUnauthorized says the caller is not authenticated.
func NewUnauthorized(msg string) *Error { return &Error{Reason: ReasonUnauthorized, Message: msg} }

// NewInternal wraps an unexpected failure; the message is generic on purpose.
func NewInternal(err error) *Error {
	return &Error{Reason: ReasonInternalError, Message: "internal error: " + err.Error()}
}

// ReasonOf returns the reason of err, or InternalError when err is not an *Error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonInternalError
}

// IsNotFound reports whether err says an object does not exist.
func IsNotFound(err error) bool { return ReasonOf(err) == ReasonNotFound }

// IsAlreadyExists reports whether err says an object exists already.
func IsAlreadyExists(err error) bool { return ReasonOf(err) == ReasonAlreadyExists }

// IsConflict reports whether err is an optimistic-concurrency conflict.
func IsConflict(err error) bool { return ReasonOf(err) == ReasonConflict }

// IsInvalid reports whether err is a validation failure.
func IsInvalid(err error) bool { return ReasonOf(err) == ReasonInvalid }

// IsGone reports whether err says a version is too old.
func IsGone(err error) bool { return ReasonOf(err) == ReasonGone }

// Status is the Kubernetes Status body every API error is sent as.
type Status struct {
	Kind       string         `json:"kind"`
	APIVersion string         `json:"apiVersion"`
	Metadata   struct{}       `json:"metadata"`
	Status     string         `json:"status"`
	Message    string         `json:"message"`
	Reason     Reason         `json:"reason"`
	Details    *StatusDetails `json:"details,omitempty"`
	Code       int            `json:"code"`
}

// StatusDetails names the object and the fields at fault.
type StatusDetails struct {
	Name              string  `json:"name,omitempty"`
	Kind              string  `json:"kind,omitempty"`
	Causes            []Cause `json:"causes,omitempty"`
	RetryAfterSeconds int     `json:"retryAfterSeconds,omitempty"`
}

// StatusOf turns any error into a Status body; errors outside the vocabulary become InternalError.
func StatusOf(err error) Status {
	var e *Error
	if !errors.As(err, &e) {
		e = NewInternal(err)
	}
	s := Status{Kind: "Status", APIVersion: "v1", Status: "Failure", Message: e.Message, Reason: e.Reason, Code: e.Reason.Code()}
	if e.Name != "" || e.Kind != "" || len(e.Causes) > 0 || e.RetryAfterSeconds > 0 {
		s.Details = &StatusDetails{Name: e.Name, Kind: e.Kind, Causes: e.Causes, RetryAfterSeconds: e.RetryAfterSeconds}
	}
	return s
}
