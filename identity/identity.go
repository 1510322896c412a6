package identity

import "github.com/rezuscloud/rezuscloud/domain"

// Identity is the authenticated caller.
type Identity struct {
	Name string
	// Role is the global role: admin, edit, view or none (domain.RoleAdmin, ...).
	Role string
	// Bindings are the user's tenant bindings (domain.RoleBinding).
	Bindings []domain.RoleBinding
	// TokenBindings, for an API token made narrower than its owner, are the
	// token's own bindings: it then has no global role (Role is none) and
	// OwnerRole is its owner's global role, which caps it.
	TokenBindings []domain.RoleBinding
	OwnerRole     string
	// AuthMethod is how the caller proved who they are: session, apitoken or static-token.
	AuthMethod string
	Groups     []string
	// UID is the user object's metadata.uid: a user deleted and created again
	// under the same name is another identity. Empty for the static token.
	UID string
	// SessionID is the login session the caller authenticated with, if any.
	SessionID string
}

// Access is what the identity may do, global and per tenant.
func (id Identity) Access() domain.Access {
	if id.TokenBindings != nil {
		return domain.NewAccess(id.OwnerRole, id.Bindings).Narrowed(id.TokenBindings)
	}
	return domain.NewAccess(id.Role, id.Bindings)
}

// Authentication methods, as whoami reports them.
const (
	AuthSession     = "session"
	AuthAPIToken    = "apitoken"
	AuthStaticToken = "static-token"
	// AuthStateCredentials is an apply's credentials for the state backend (state.go).
	AuthStateCredentials = "state-credentials"
)

// SessionCookie carries the session JWT for browsers.
const SessionCookie = "rezus_session"

// APITokenPrefix starts every API token, so leaked tokens are recognisable.
const APITokenPrefix = "rzt_"

const (
	secretSigningKey = "session-signing-key"
	secretUserPrefix = "user-password."
	secretTokenPrefx = "apitoken."
	// secretStateKey signs apply credentials for the state backend.
	secretStateKey = "tfstate-credentials-key"
)
