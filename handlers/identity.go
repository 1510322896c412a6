package handlers

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Authentication methods, as whoami reports them.
const (
	AuthSession     = "session"
	AuthAPIToken    = "apitoken"
	AuthStaticToken = "static-token"
	// AuthStateCredentials is an apply's credentials for the state backend (tfstate.go).
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

// IdentityConfig configures users, sessions and tokens. The zero value is usable.
type IdentityConfig struct {
	// SessionTTL is how long a login lasts; default 12h.
	SessionTTL time.Duration
	// SigningKey signs session JWTs (at least 32 bytes). Default: a random key
	// generated on first start and kept in the secrets bucket.
	SigningKey []byte
	// StaticToken, when set, is a break-glass admin bearer token (from --admin-token).
	StaticToken string
	// SecureCookies marks the session cookie Secure (serve over TLS).
	SecureCookies bool
	// LoginFailures and LoginWindow bound failed logins per user and per client
	// address: after LoginFailures failures within LoginWindow, 429. Defaults 5 and 1 minute.
	LoginFailures int
	LoginWindow   time.Duration
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

func (c *IdentityConfig) setDefaults() {
	if c.SessionTTL == 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.LoginFailures == 0 {
		c.LoginFailures = 5
	}
	if c.LoginWindow == 0 {
		c.LoginWindow = time.Minute
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

// IdentityService authenticates callers (session JWTs, API tokens, the static
// token) and manages passwords, sessions and token secrets. Secrets live in the
// secrets bucket, never in events or projections.
type IdentityService struct {
	cfg      IdentityConfig
	store    *eventstore.Store
	cache    *projections.Cache
	secrets  SecretStore
	sessions *eventstore.Sessions
	key      []byte
	// stateKey signs apply credentials for the state backend; kept apart
	// from the session key so neither kind of token can pass for the other.
	stateKey []byte
	static   *StaticToken
	limiter  *loginLimiter
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
func (s *IdentityService) ExpectBootstrap() { s.bootstrapPending.Store(true) }

// Ready reports whether an expected bootstrap has finished.
func (s *IdentityService) Ready() bool { return !s.bootstrapPending.Load() }

// NewIdentityService provisions the secrets and sessions buckets and loads (or
// creates) the session signing key.
func NewIdentityService(ctx context.Context, cfg IdentityConfig, store *eventstore.Store, cache *projections.Cache) (*IdentityService, error) {
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
	s := &IdentityService{cfg: cfg, store: store, cache: cache, secrets: secrets, sessions: sessions, key: key, stateKey: stateKey,
		limiter: newLoginLimiter(cfg.LoginFailures, cfg.LoginWindow, 10000), dummyHash: dummy, lastUsed: map[string]time.Time{}}
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

type sessionClaims struct {
	jwt.RegisteredClaims
}

// Authenticate identifies the caller from a bearer token (API token, session
// JWT or the static token) or the session cookie. Revoked sessions and tokens,
// expired ones and those of disabled or deleted users are refused at once.
func (s *IdentityService) Authenticate(r *http.Request) (Identity, error) {
	ctx := r.Context()
	cred := ""
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || tok == "" {
			return Identity{}, domain.NewUnauthorized("the Authorization header must be \"Bearer <token>\"")
		}
		cred = tok
	} else if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		cred = c.Value
	}
	switch {
	case cred == "":
		return Identity{}, domain.NewUnauthorized("authentication required: log in or send a bearer token")
	case strings.HasPrefix(cred, APITokenPrefix):
		return s.authenticateToken(ctx, cred)
	case s.static != nil && strings.Count(cred, ".") != 2:
		return s.static.Authenticate(r)
	}
	return s.authenticateSession(ctx, cred)
}

func (s *IdentityService) authenticateSession(ctx context.Context, raw string) (Identity, error) {
	claims := &sessionClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return s.key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer("rezuscloud"),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(s.cfg.Now))
	if err != nil {
		return Identity{}, domain.NewUnauthorized("the session is not valid or has expired; log in again")
	}
	live, err := s.sessions.Live(ctx, claims.ID)
	if err != nil {
		return Identity{}, err
	}
	if !live {
		return Identity{}, domain.NewUnauthorized("the session has ended; log in again")
	}
	return s.userIdentity(claims.Subject, AuthSession)
}

// userIdentity looks the user up now, so a changed role, a disabled or a
// deleted user takes effect on the next request.
func (s *IdentityService) userIdentity(name, method string) (Identity, error) {
	u, ok := s.user(name)
	if !ok || u.Spec.Disabled {
		return Identity{}, domain.NewUnauthorized("the user does not exist or is disabled")
	}
	return Identity{Name: name, Role: u.Spec.Role, AuthMethod: method}, nil
}

func (s *IdentityService) user(name string) (*domain.User, bool) {
	raw, ok := s.cache.Get(domain.Ref{Kind: domain.UserKind.Kind, Name: name})
	if !ok {
		return nil, false
	}
	u := &domain.User{}
	if err := json.Unmarshal(raw, u); err != nil || u.Metadata.DeletionTimestamp != nil {
		return nil, false
	}
	return u, true
}

func (s *IdentityService) authenticateToken(ctx context.Context, raw string) (Identity, error) {
	name, secret, ok := strings.Cut(strings.TrimPrefix(raw, APITokenPrefix), "_")
	bad := domain.NewUnauthorized("the API token is not valid, expired or revoked")
	if !ok || domain.ValidateName(name, "") != nil || secret == "" {
		return Identity{}, bad
	}
	stored, err := s.secrets.Get(ctx, secretTokenPrefx+name)
	if errors.Is(err, eventstore.ErrSecretNotFound) {
		return Identity{}, bad
	}
	if err != nil {
		return Identity{}, err
	}
	sum := sha256.Sum256([]byte(secret))
	want := make([]byte, hex.DecodedLen(len(stored)))
	if n, err := hex.Decode(want, stored); err != nil || n != len(sum) || subtle.ConstantTimeCompare(sum[:], want) != 1 {
		return Identity{}, bad
	}
	tokRaw, ok := s.cache.Get(domain.Ref{Kind: domain.APITokenKind.Kind, Name: name})
	if !ok {
		return Identity{}, bad
	}
	tok := &domain.APIToken{}
	if err := json.Unmarshal(tokRaw, tok); err != nil || tok.Metadata.DeletionTimestamp != nil {
		return Identity{}, bad
	}
	now := s.cfg.Now()
	if tok.Spec.ExpiresAt != nil && !now.Before(*tok.Spec.ExpiresAt) {
		return Identity{}, bad
	}
	id, err := s.userIdentity(tok.Spec.User, AuthAPIToken)
	if err != nil {
		return Identity{}, bad
	}
	s.recordUse(ctx, name, now)
	return id, nil
}

// recordUse writes the token's lastUsed, at most every TokenUseInterval.
func (s *IdentityService) recordUse(ctx context.Context, name string, now time.Time) {
	s.mu.Lock()
	last, seen := s.lastUsed[name]
	if seen && now.Sub(last) < s.cfg.TokenUseInterval {
		s.mu.Unlock()
		return
	}
	s.lastUsed[name] = now
	s.mu.Unlock()
	status, _ := json.Marshal(domain.APITokenStatus{LastUsed: &now})
	_, err := s.store.Execute(ctx, domain.Command{Op: domain.OpUpdateStatus,
		Ref:    domain.Ref{Kind: domain.APITokenKind.Kind, Name: name},
		Object: &domain.Object{Status: status}, Actor: "system:auth", Now: now},
		eventstore.UpdateOptions{Retries: 3, Hint: s.cache})
	if err != nil {
		s.cfg.Log.Warn("recording API token use", "token", name, "err", err)
	}
}

// IssueAPIToken makes the secret of the named token and stores its hash. The
// returned token is shown to the user once and never again.
func (s *IdentityService) IssueAPIToken(ctx context.Context, name string) (string, error) {
	b, err := randomBytes(32)
	if err != nil {
		return "", err
	}
	secret := base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(secret))
	if err := s.secrets.Put(ctx, secretTokenPrefx+name, []byte(hex.EncodeToString(sum[:]))); err != nil {
		return "", err
	}
	return APITokenPrefix + name + "_" + secret, nil
}

// RevokeAPIToken removes a token's secret: it is refused from the next request on.
func (s *IdentityService) RevokeAPIToken(ctx context.Context, name string) error {
	return s.secrets.Delete(ctx, secretTokenPrefx+name)
}

// SetPassword hashes and stores a user's password.
func (s *IdentityService) SetPassword(ctx context.Context, user, password string) error {
	if causes := domain.ValidatePassword(password, "password"); causes != nil {
		return domain.NewInvalid(domain.UserKind.Kind, user, causes)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.cfg.PasswordCost)
	if err != nil {
		return fmt.Errorf("hashing the password: %w", err)
	}
	return s.secrets.Put(ctx, secretUserPrefix+user, hash)
}

// DeletePassword removes a user's password (when the user is deleted).
func (s *IdentityService) DeletePassword(ctx context.Context, user string) error {
	return s.secrets.Delete(ctx, secretUserPrefix+user)
}

// CheckPassword reports whether password is the user's; it takes as long for an unknown user.
func (s *IdentityService) CheckPassword(ctx context.Context, user, password string) (bool, error) {
	hash, err := s.secrets.Get(ctx, secretUserPrefix+user)
	if errors.Is(err, eventstore.ErrSecretNotFound) {
		_ = bcrypt.CompareHashAndPassword(s.dummyHash, []byte(password))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return bcrypt.CompareHashAndPassword(hash, []byte(password)) == nil, nil
}

// Login checks a password and starts a session; it returns the signed session token.
func (s *IdentityService) Login(ctx context.Context, user, password, client string) (string, time.Time, Identity, error) {
	now := s.cfg.Now()
	if wait := s.limiter.blocked(now, "user:"+user, "addr:"+client); wait > 0 {
		secs := int(wait.Seconds()) + 1
		return "", time.Time{}, Identity{}, &domain.Error{Reason: domain.ReasonTooManyRequests, RetryAfterSeconds: secs,
			Message: fmt.Sprintf("too many failed logins; retry in %d seconds", secs)}
	}
	ok, err := s.CheckPassword(ctx, user, password)
	if err != nil {
		return "", time.Time{}, Identity{}, err
	}
	var id Identity
	if ok {
		id, err = s.userIdentity(user, AuthSession)
		ok = err == nil
	}
	if !ok {
		s.limiter.fail(now, "user:"+user, "addr:"+client)
		return "", time.Time{}, Identity{}, domain.NewUnauthorized("wrong user name or password")
	}
	s.limiter.succeed("user:" + user)
	sid := uuid.NewString()
	if err := s.sessions.Start(ctx, sid, user); err != nil {
		return "", time.Time{}, Identity{}, err
	}
	exp := now.Add(s.cfg.SessionTTL)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, sessionClaims{jwt.RegisteredClaims{
		Issuer: "rezuscloud", Subject: user, ID: sid, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
	}}).SignedString(s.key)
	if err != nil {
		return "", time.Time{}, Identity{}, fmt.Errorf("signing the session: %w", err)
	}
	return tok, exp, id, nil
}

// Logout ends the session the request carries, if any.
func (s *IdentityService) Logout(ctx context.Context, r *http.Request) error {
	raw := ""
	if h, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		raw = h
	} else if c, err := r.Cookie(SessionCookie); err == nil {
		raw = c.Value
	}
	claims := &sessionClaims{}
	if _, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return s.key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithTimeFunc(s.cfg.Now)); err != nil {
		return nil
	}
	return s.sessions.End(ctx, claims.ID)
}

// Bootstrap creates the first admin when there are no users: with password, or
// a generated one written to passwordFile (mode 0600). It returns whether it
// created the admin. It runs under a lease, so replicas starting together do
// it once, and in an order that a crash at any point leaves it to be redone on
// the next start: password hash, file, then the user.
func (s *IdentityService) Bootstrap(ctx context.Context, password, passwordFile string) (created bool, err error) {
	leases, err := eventstore.OpenLeases(ctx, s.store, eventstore.LeaseTTL)
	if err != nil {
		return false, err
	}
	defer func() {
		if err == nil {
			s.bootstrapPending.Store(false)
		}
	}()
	err = leases.Do(ctx, "bootstrap-admin", uuid.NewString(), func(outer context.Context) error {
		if err := s.cache.Sync(outer); err != nil {
			return err
		}
		if s.cache.Count(domain.UserKind.Kind, "") > 0 {
			return nil
		}
		// Finish the writes even if shutdown begins meanwhile: they are short.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(outer), 30*time.Second)
		defer cancel()
		generated := password == ""
		if generated {
			b, err := randomBytes(18)
			if err != nil {
				return err
			}
			password = base64.RawURLEncoding.EncodeToString(b)
		}
		if causes := domain.ValidatePassword(password, "REZUSCLOUD_ADMIN_PASSWORD"); causes != nil {
			return domain.NewInvalid(domain.UserKind.Kind, "admin", causes)
		}
		if err := s.SetPassword(ctx, "admin", password); err != nil {
			return err
		}
		if generated && passwordFile != "" {
			if err := os.WriteFile(passwordFile, []byte(password+"\n"), 0o600); err != nil {
				return fmt.Errorf("writing %s: %w", passwordFile, err)
			}
		}
		res, err := s.store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: domain.UserKind.Kind, Name: "admin"},
			Object: &domain.Object{Spec: []byte(`{"role":"admin","displayName":"Administrator"}`)},
			Actor:  "system:bootstrap", Now: s.cfg.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{})
		if domain.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating the admin user: %w", err)
		}
		created = true
		// The read model stops at shutdown; do not wait for it past that.
		_ = s.cache.WaitFor(outer, res.Seq)
		return nil
	})
	return created, err
}

// loginLimiter counts failed logins per key in a fixed window. It is per
// replica: a determined attacker spreading over replicas gets replicas × the
// limit, which is still a hard bound.
type loginLimiter struct {
	mu      sync.Mutex
	max     int
	window  time.Duration
	cap     int
	entries map[string]*failures
}

type failures struct {
	n     int
	since time.Time
}

func newLoginLimiter(max int, window time.Duration, capacity int) *loginLimiter {
	return &loginLimiter{max: max, window: window, cap: capacity, entries: map[string]*failures{}}
}

// blocked returns how long any of keys must still wait, or 0.
func (l *loginLimiter) blocked(now time.Time, keys ...string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait time.Duration
	for _, k := range keys {
		f := l.entries[k]
		if f == nil || now.Sub(f.since) >= l.window {
			continue
		}
		if f.n >= l.max {
			wait = max(wait, l.window-now.Sub(f.since))
		}
	}
	return wait
}

func (l *loginLimiter) fail(now time.Time, keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		f := l.entries[k]
		if f == nil || now.Sub(f.since) >= l.window {
			if f == nil && len(l.entries) >= l.cap {
				l.evict(now)
			}
			f = &failures{since: now}
			l.entries[k] = f
		}
		f.n++
	}
}

func (l *loginLimiter) succeed(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, key)
}

// evict drops expired entries, or the oldest when none expired, so the map stays bounded.
func (l *loginLimiter) evict(now time.Time) {
	var oldest string
	for k, f := range l.entries {
		if now.Sub(f.since) >= l.window {
			delete(l.entries, k)
		} else if oldest == "" || f.since.Before(l.entries[oldest].since) {
			oldest = k
		}
	}
	if len(l.entries) >= l.cap && oldest != "" {
		delete(l.entries, oldest)
	}
}

// StateUsername is the HTTP basic-auth user name of apply credentials.
const StateUsername = "apply"

// stateTokenVersion starts every apply credential, so its format can change.
const stateTokenVersion = "v1"

// stateClaims is what an apply credential says: whose state, for which
// apply, until when (Unix seconds).
type stateClaims struct {
	Tenant  string `json:"t"`
	ApplyID string `json:"a"`
	Expires int64  `json:"e"`
}

// maxApplyIDLength bounds the apply id an apply credential carries.
const maxApplyIDLength = 256

// IssueStateCredentials returns HTTP basic-auth credentials for the state
// backend that reach only tenant's state, on behalf of applyID, until ttl
// passes: the user name StateUsername and a password that is
// "v1.<claims>.<HMAC-SHA256 of them>" (base64url), signed with a key kept in
// the secrets store. Nothing is stored per credential, so every replica
// accepts them and they cannot be revoked before they expire: keep ttl to
// the run's timeout.
func (s *IdentityService) IssueStateCredentials(tenant, applyID string, ttl time.Duration) (username, password string, err error) {
	if causes := domain.ValidateName(tenant, "tenant"); causes != nil {
		return "", "", domain.NewBadRequest("bad tenant name: "+causes[0].Message, causes...)
	}
	if applyID == "" || len(applyID) > maxApplyIDLength {
		return "", "", domain.NewBadRequest(fmt.Sprintf("the apply id must be 1 to %d bytes", maxApplyIDLength))
	}
	if ttl <= 0 {
		return "", "", domain.NewBadRequest("the credentials' lifetime must be positive")
	}
	claims, err := json.Marshal(stateClaims{Tenant: tenant, ApplyID: applyID, Expires: s.cfg.Now().Add(ttl).Unix()})
	if err != nil {
		return "", "", err
	}
	body := stateTokenVersion + "." + base64.RawURLEncoding.EncodeToString(claims)
	return StateUsername, body + "." + base64.RawURLEncoding.EncodeToString(s.stateMAC(body)), nil
}

func (s *IdentityService) stateMAC(body string) []byte {
	m := hmac.New(sha256.New, s.stateKey)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// verifyStateCredentials checks apply credentials for tenant's state and
// returns the apply they were issued to. Forged, malformed and expired
// credentials are Unauthorized; good ones for another tenant are Forbidden.
func (s *IdentityService) verifyStateCredentials(tenant, username, password string) (applyID string, err error) {
	bad := domain.NewUnauthorized("the state credentials are not valid or have expired")
	version, rest, ok := strings.Cut(password, ".")
	if subtle.ConstantTimeCompare([]byte(username), []byte(StateUsername)) != 1 || !ok || version != stateTokenVersion {
		return "", bad
	}
	encClaims, encMAC, ok := strings.Cut(rest, ".")
	if !ok {
		return "", bad
	}
	mac, err := base64.RawURLEncoding.DecodeString(encMAC)
	if err != nil || !hmac.Equal(mac, s.stateMAC(version+"."+encClaims)) {
		return "", bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(encClaims)
	if err != nil {
		return "", bad
	}
	var c stateClaims
	if err := json.Unmarshal(raw, &c); err != nil || c.ApplyID == "" {
		return "", bad
	}
	if !s.cfg.Now().Before(time.Unix(c.Expires, 0)) {
		return "", domain.NewUnauthorized("the state credentials have expired")
	}
	if c.Tenant != tenant {
		return "", domain.NewForbidden(stateKind, tenant, "these credentials reach only the state of tenant \""+c.Tenant+"\"")
	}
	return c.ApplyID, nil
}
