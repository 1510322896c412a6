package identity

// Identity is the authenticated caller.
type Identity struct {
	Name string
	// Role is admin, edit or view (domain.RoleAdmin, ...).
	Role string
	// AuthMethod is how the caller proved who they are: session, apitoken or static-token.
	AuthMethod string
	Groups     []string
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
