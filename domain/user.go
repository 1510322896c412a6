package domain

import (
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Roles, from least to most allowed.
const (
	RoleView  = "view"
	RoleEdit  = "edit"
	RoleAdmin = "admin"
)

// MinPasswordLength is the shortest password a user may set.
const MinPasswordLength = 12

// UserKind is a person (or robot) who logs in. The password is never part of the
// object: it is write-only in the API and kept hashed outside events.
var UserKind = register(&KindInfo{
	Kind: "User", Plural: "users", Subject: "user",
	NormalizeSpec:   func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[UserSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[EmptyStatus](raw, "status") },
})

// UserSpec declares a user.
type UserSpec struct {
	// Role is the global role: admin, edit or view over everything, or none
	// (access only through Bindings).
	Role string `json:"role"`
	// Bindings grant roles on some tenants, on top of the global role.
	Bindings []RoleBinding `json:"bindings,omitempty"`
	// DisplayName is shown in the UI.
	DisplayName string `json:"displayName,omitempty"`
	// Disabled users cannot log in and their sessions and tokens are refused.
	Disabled bool `json:"disabled,omitempty"`
	// External, for a user who signs in through single sign-on, is the
	// identity-provider account the user is: created with the user at its
	// first login. A user with External signs in only through that account.
	External *ExternalIdentity `json:"external,omitempty"`
}

// ExternalIdentity names an account at an OpenID provider: the ID token's
// issuer and subject, which together are stable and unique (a name or an
// e-mail address can be reused).
type ExternalIdentity struct {
	Issuer  string `json:"issuer"`
	Subject string `json:"subject"`
}

// Limits on an external identity.
const (
	MaxIssuerLength  = 1024
	MaxSubjectLength = 255
)

func (e *ExternalIdentity) validate(f *field.Path) []Cause {
	var causes []Cause
	switch {
	case e.Issuer == "":
		causes = append(causes, Cause{Field: f.Child("issuer").String(), Type: CauseRequired, Message: "required"})
	case len(e.Issuer) > MaxIssuerLength:
		causes = append(causes, Cause{Field: f.Child("issuer").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxIssuerLength)})
	}
	switch {
	case e.Subject == "":
		causes = append(causes, Cause{Field: f.Child("subject").String(), Type: CauseRequired, Message: "required"})
	case len(e.Subject) > MaxSubjectLength:
		// OpenID Connect Core 1.0, section 2: at most 255 ASCII characters.
		causes = append(causes, Cause{Field: f.Child("subject").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxSubjectLength)})
	}
	return causes
}

// Default does nothing: a role must be chosen.
func (s *UserSpec) Default() {}

// Validate reports every bad field.
func (s *UserSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := oneOf(s.Role, f.Child("role"), RoleAdmin, RoleEdit, RoleView, RoleNone)
	causes = append(causes, validateBindings(s.Bindings, f.Child("bindings"))...)
	if len(s.DisplayName) > 256 {
		causes = append(causes, Cause{Field: f.Child("displayName").String(), Type: CauseTooLong, Message: "must be no more than 256 characters"})
	}
	if s.External != nil {
		causes = append(causes, s.External.validate(f.Child("external"))...)
	}
	return causes
}

// ValidatePassword checks a new password.
func ValidatePassword(pw, field string) []Cause {
	switch {
	case len(pw) < MinPasswordLength:
		return []Cause{{Field: field, Type: CauseInvalid, Message: fmt.Sprintf("must be at least %d characters", MinPasswordLength)}}
	case len(pw) > 72:
		// bcrypt ignores everything after 72 bytes; refuse rather than pretend.
		return []Cause{{Field: field, Type: CauseTooLong, Message: "must be no more than 72 bytes"}}
	}
	return nil
}

// APITokenKind is a long-lived credential of a user for programs. The secret
// is shown once at creation and kept only as a hash, outside events.
var APITokenKind = register(&KindInfo{
	Kind: "APIToken", Plural: "apitokens", Subject: "apitoken",
	NormalizeSpec: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[APITokenSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) {
		return normalizeAs[APITokenStatus](raw, "status")
	},
	InitialStatus: func() json.RawMessage { return json.RawMessage(`{}`) },
})

// APITokenSpec declares a token.
type APITokenSpec struct {
	// User is the token's owner; it acts with the owner's role.
	User string `json:"user"`
	// Description says what the token is for.
	Description string `json:"description,omitempty"`
	// ExpiresAt, when set, is when the token stops working.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Bindings, when set, narrow the token: it acts only on these tenants,
	// with no global role, and never with more than its owner has there.
	Bindings []RoleBinding `json:"bindings,omitempty"`
}

// Default does nothing: the API fills the owner in.
func (s *APITokenSpec) Default() {}

// Validate reports every bad field.
func (s *APITokenSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := ValidateName(s.User, f.Child("user").String())
	causes = append(causes, validateBindings(s.Bindings, f.Child("bindings"))...)
	if len(s.Description) > 1024 {
		causes = append(causes, Cause{Field: f.Child("description").String(), Type: CauseTooLong, Message: "must be no more than 1024 characters"})
	}
	return causes
}

// APITokenStatus is what the server observed about a token.
type APITokenStatus struct {
	// LastUsed is when the token last authenticated a request (updated at most every few minutes).
	LastUsed *time.Time `json:"lastUsed,omitempty"`
}

// Default does nothing.
func (s *APITokenStatus) Default() {}

// Validate accepts any status.
func (s *APITokenStatus) Validate(string) []Cause { return nil }

// User is the typed view of a User object.
type User struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       UserSpec   `json:"spec"`
}

// APIToken is the typed view of an APIToken object.
type APIToken struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   ObjectMeta     `json:"metadata"`
	Spec       APITokenSpec   `json:"spec"`
	Status     APITokenStatus `json:"status"`
}
