package identity

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Service authenticates callers (session JWTs, API tokens, the static
// token) and manages passwords, sessions and token secrets. Secrets live in the
// secrets bucket, never in events or projections.
type Service struct {
	cfg      Config
	store    *eventstore.Store
	cache    *projections.Cache
	secrets  SecretStore
	sessions *eventstore.Sessions
	key      []byte
	// stateKey signs apply credentials for the state backend; kept apart
	// from the session key so neither kind of token can pass for the other.
	stateKey []byte
	static   *StaticToken
	// ssoCfg is single sign-on, when configured (EnableSSO).
	ssoCfg atomic.Pointer[sso]
	// groupIndex is the group bindings, compiled (groups.go).
	groupIndex groupIndex
	limiter    *loginLimiter
	// tokenWrites rate-limits self-service writes of API tokens.
	tokenWrites *tokenWriteBuckets
	// dummyHash is compared against for unknown users, so a login takes as long
	// whether or not the user exists.
	dummyHash []byte

	mu       sync.Mutex
	lastUsed map[string]time.Time

	// bootstrapPending is set while a first-admin bootstrap is expected and not
	// done, so /readyz does not send clients to log in before there is anyone.
	bootstrapPending atomic.Bool
}

// ExpectBootstrap marks the service not ready until Bootstrap has run.
func (s *Service) ExpectBootstrap() { s.bootstrapPending.Store(true) }

// SecureCookies reports whether the session cookie must be marked Secure
// (the server is served over TLS).
func (s *Service) SecureCookies() bool { return s.cfg.SecureCookies }

// Ready reports whether an expected bootstrap has finished.
func (s *Service) Ready() bool { return !s.bootstrapPending.Load() }

// NewService provisions the secrets and sessions buckets and loads (or
// creates) the session signing key.
func NewService(ctx context.Context, cfg Config, store *eventstore.Store, cache *projections.Cache) (*Service, error) {
	cfg.setDefaults()
	var secrets SecretStore = cfg.Secrets
	if secrets == nil {
		plain, err := eventstore.OpenSecrets(ctx, store)
		if err != nil {
			return nil, err
		}
		secrets = plain
	}
	sessions, err := eventstore.OpenSessions(ctx, store, cfg.SessionTTL+time.Hour)
	if err != nil {
		return nil, err
	}
	key := cfg.SigningKey
	if len(key) == 0 {
		key, err = getOrCreate(ctx, secrets, secretSigningKey, func() ([]byte, error) { return randomBytes(32) })
		if err != nil {
			return nil, fmt.Errorf("loading the session signing key: %w", err)
		}
	}
	if len(key) < 32 {
		return nil, errors.New("the session signing key must be at least 32 bytes")
	}
	stateKey, err := getOrCreate(ctx, secrets, secretStateKey, func() ([]byte, error) { return randomBytes(32) })
	if err != nil {
		return nil, fmt.Errorf("loading the state credentials key: %w", err)
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("not a password of anyone"), cfg.PasswordCost)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, store: store, cache: cache, secrets: secrets, sessions: sessions, key: key, stateKey: stateKey,
		limiter: newLoginLimiter(cfg.LoginFailures, cfg.LoginWindow, cfg.LoginMaxDelay, 10000), dummyHash: dummy, lastUsed: map[string]time.Time{},
		tokenWrites: newTokenWriteBuckets(cfg.TokenWriteBurst, cfg.TokenWriteInterval, 10000)}
	if cfg.StaticToken != "" {
		s.static = NewStaticToken(cfg.StaticToken, Identity{Name: "admin", Role: domain.RoleAdmin, AuthMethod: AuthStaticToken})
	}
	return s, nil
}

// getOrCreate returns the secret under key, creating it when missing; replicas
// racing here all end up with the value that was created first.
func getOrCreate(ctx context.Context, secrets SecretStore, key string, generate func() ([]byte, error)) ([]byte, error) {
	if v, err := secrets.Get(ctx, key); err == nil {
		return v, nil
	} else if !errors.Is(err, eventstore.ErrSecretNotFound) {
		return nil, err
	}
	v, err := generate()
	if err != nil {
		return nil, err
	}
	created, err := secrets.Create(ctx, key, v)
	if err != nil {
		return nil, err
	}
	if !created {
		return secrets.Get(ctx, key)
	}
	return v, nil
}

func randomBytes(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return b, nil
}
