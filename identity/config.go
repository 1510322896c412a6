package identity

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Config configures users, sessions and tokens. The zero value is usable.
type Config struct {
	// SessionTTL is how long a login lasts; default 12h.
	SessionTTL time.Duration
	// SigningKey signs session JWTs (at least 32 bytes). Default: a random key
	// generated on first start and kept in the secrets bucket.
	SigningKey []byte
	// StaticToken, when set, is a break-glass admin bearer token (from --admin-token).
	StaticToken string
	// DisablePasswordLogin refuses logins with a password (single sign-on
	// and the static token stay); off by default.
	DisablePasswordLogin bool
	// SecureCookies marks the session cookie Secure (serve over TLS).
	SecureCookies bool
	// LoginFailures and LoginWindow bound failed logins per client address:
	// after LoginFailures failures within LoginWindow, 429 until the window
	// passes. Per user, LoginFailures failures start a delay of LoginWindow that
	// doubles with each further failure up to LoginMaxDelay; an address with no
	// failures is not held back by it (see loginLimiter). Defaults 5, 1 minute
	// and 15 minutes.
	LoginFailures int
	LoginWindow   time.Duration
	LoginMaxDelay time.Duration
	// MaxTokensPerUser caps the API tokens one user may own; default 50.
	MaxTokensPerUser int
	// TokenWriteBurst and TokenWriteInterval rate-limit a non-admin's writes
	// of its own API tokens (create, update, patch; never delete): a bucket of
	// TokenWriteBurst writes per user, refilled by one every TokenWriteInterval.
	// Defaults 10 and 6 seconds.
	TokenWriteBurst    int
	TokenWriteInterval time.Duration
	// TokenUseInterval is how often a token's lastUsed is written at most; default 5 minutes.
	TokenUseInterval time.Duration
	// Secrets keeps password hashes, token hashes and the signing key; the
	// server passes a sealing store. Default: the plain secrets bucket.
	Secrets SecretStore
	// PasswordCost is the bcrypt cost of password hashes; default
	// bcrypt.DefaultCost. Tests lower it (bcrypt.MinCost) to stay fast.
	PasswordCost int
	// Now is the clock; default time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// SecretStore keeps secrets by key; eventstore.Secrets and eventstore.SealedSecrets are ones.
type SecretStore interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
	Create(ctx context.Context, key string, value []byte) (bool, error)
	Delete(ctx context.Context, key string) error
}

func (c *Config) setDefaults() {
	if c.SessionTTL == 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.LoginFailures == 0 {
		c.LoginFailures = 5
	}
	if c.LoginWindow == 0 {
		c.LoginWindow = time.Minute
	}
	if c.LoginMaxDelay == 0 {
		c.LoginMaxDelay = 15 * time.Minute
	}
	if c.MaxTokensPerUser == 0 {
		c.MaxTokensPerUser = 50
	}
	if c.TokenWriteBurst == 0 {
		c.TokenWriteBurst = 10
	}
	if c.TokenWriteInterval == 0 {
		c.TokenWriteInterval = 6 * time.Second
	}
	if c.TokenUseInterval == 0 {
		c.TokenUseInterval = 5 * time.Minute
	}
	if c.PasswordCost == 0 {
		c.PasswordCost = bcrypt.DefaultCost
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}
