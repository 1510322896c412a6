package identity

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

type sessionClaims struct {
	jwt.RegisteredClaims
	// UID is the user's metadata.uid at login: a session is refused once the
	// user of that name is another one (deleted and created again).
	UID string `json:"uid"`
	// SSO marks a session started by single sign-on: its groups and its
	// provider's word are kept in an ssoSession record.
	SSO bool `json:"sso,omitempty"`
}

// Authenticate identifies the caller from a bearer token (API token, session
// JWT or the static token) or the session cookie. Revoked sessions and tokens,
// expired ones and those of disabled or deleted users are refused at once.
func (s *Service) Authenticate(r *http.Request) (Identity, error) {
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

func (s *Service) authenticateSession(ctx context.Context, raw string) (Identity, error) {
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
	if claims.UID == "" {
		// Sessions from before uids were recorded: log in again once.
		return Identity{}, domain.NewUnauthorized("the session has ended; log in again")
	}
	if !claims.SSO && s.cfg.DisablePasswordLogin {
		// A session says it came from single sign-on (its signed sso claim,
		// there since single sign-on was, and an ssoSession record beside
		// it); every other one came from a password, whatever version made
		// it. With password logins off they end, for good: turning them on
		// again does not bring them back.
		_ = s.sessions.End(ctx, claims.ID)
		return Identity{}, errPasswordLoginOff
	}
	id, _, err := s.userIdentity(claims.Subject, claims.UID, AuthSession)
	if err != nil {
		return Identity{}, err
	}
	id.SessionID = claims.ID
	if claims.SSO {
		groups, err := s.ssoGroups(ctx, claims.ID, id.Name, id.UID)
		if err != nil {
			return Identity{}, err
		}
		id = s.withGroups(id, groups)
	}
	return id, nil
}

// userIdentity looks the user up now, so a changed role, a disabled or a
// deleted user takes effect on the next request. A non-empty uid must be the
// user's current one: credentials of a deleted user do not pass for a new
// user of the same name.
func (s *Service) userIdentity(name, uid, method string) (Identity, *domain.User, error) {
	u, ok := s.user(name)
	if !ok || u.Spec.Disabled || uid != "" && u.Metadata.UID != uid {
		return Identity{}, nil, domain.NewUnauthorized("the user does not exist or is disabled")
	}
	return Identity{Name: name, Role: u.Spec.Role, Bindings: u.Spec.Bindings, AuthMethod: method, UID: u.Metadata.UID}, u, nil
}

func (s *Service) user(name string) (*domain.User, bool) {
	u, ok, err := projections.Get[domain.User](s.cache, domain.ObjectRef(domain.UserKind, "", name))
	if !ok || err != nil || u.Metadata.DeletionTimestamp != nil {
		return nil, false
	}
	return u, true
}

func (s *Service) authenticateToken(ctx context.Context, raw string) (Identity, error) {
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
	hash, ownerUID, _ := strings.Cut(string(stored), ":")
	sum := sha256.Sum256([]byte(secret))
	want := make([]byte, hex.DecodedLen(len(hash)))
	if n, err := hex.Decode(want, []byte(hash)); err != nil || n != len(sum) || subtle.ConstantTimeCompare(sum[:], want) != 1 {
		return Identity{}, bad
	}
	tok, ok, err := projections.Get[domain.APIToken](s.cache, domain.ObjectRef(domain.APITokenKind, "", name))
	if !ok || err != nil || tok.Metadata.DeletionTimestamp != nil {
		return Identity{}, bad
	}
	now := s.cfg.Now()
	if tok.Spec.ExpiresAt != nil && !now.Before(*tok.Spec.ExpiresAt) {
		return Identity{}, bad
	}
	id, owner, err := s.userIdentity(tok.Spec.User, ownerUID, AuthAPIToken)
	if err != nil || ownerUID == "" && !madeAfter(tok.Metadata.CreationTimestamp, owner.Metadata.CreationTimestamp) {
		// A token stored before owners' uids were recorded passes only if it
		// is not older than its user: not a token of an earlier user of that name.
		return Identity{}, bad
	}
	if err := s.tokenOwnerVouched(ctx, owner); err != nil {
		return Identity{}, err
	}
	if len(tok.Spec.Bindings) > 0 {
		// A narrowed token: only its bindings, each capped by what the
		// owner has now (Identity.Access).
		id.TokenBindings, id.OwnerRole, id.Role = tok.Spec.Bindings, id.Role, domain.RoleNone
	}
	s.recordUse(ctx, name, now)
	return id, nil
}

func madeAfter(tok, user *time.Time) bool {
	return tok != nil && user != nil && !tok.Before(*user)
}

// recordUse writes the token's lastUsed, at most every TokenUseInterval.
func (s *Service) recordUse(ctx context.Context, name string, now time.Time) {
	s.mu.Lock()
	last, seen := s.lastUsed[name]
	if seen && now.Sub(last) < s.cfg.TokenUseInterval {
		s.mu.Unlock()
		return
	}
	s.lastUsed[name] = now
	s.mu.Unlock()
	w := eventstore.StatusWriter{Store: s.store, Actor: "system:auth", Now: func() time.Time { return now }, Hint: s.cache, Retries: 3}
	_, err := eventstore.UpdateStatus(ctx, w, domain.ObjectRef(domain.APITokenKind, "", name),
		func(_ *domain.Object, st *domain.APITokenStatus) (bool, error) {
			st.LastUsed = &now
			return true, nil
		})
	if err != nil {
		s.cfg.Log.Warn("recording API token use", "token", name, "err", err)
	}
}
