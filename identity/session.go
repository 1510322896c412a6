package identity

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/domain"
)

// errPasswordLoginOff refuses a session of a password login on a server
// whose password logins are off.
var errPasswordLoginOff = domain.NewUnauthorized("password login is disabled on this server and this session came from one; sign in with single sign-on")

// Login checks a password and starts a session; it returns the signed session token.
func (s *Service) Login(ctx context.Context, user, password, client string) (string, time.Time, Identity, error) {
	now := s.cfg.Now()
	if s.cfg.DisablePasswordLogin {
		return "", time.Time{}, Identity{}, &domain.Error{Reason: domain.ReasonForbidden,
			Message: "password login is disabled on this server; sign in with single sign-on"}
	}
	if err := s.limited(now, user, client); err != nil {
		return "", time.Time{}, Identity{}, err
	}
	ok, err := s.CheckPassword(ctx, user, password)
	if err != nil {
		return "", time.Time{}, Identity{}, err
	}
	var id Identity
	if ok {
		var u *domain.User
		id, u, err = s.userIdentity(user, "", AuthSession)
		// A user of an identity provider signs in there only.
		ok = err == nil && u.Spec.External == nil
	}
	if !ok {
		s.limiter.fail(now, user, client)
		return "", time.Time{}, Identity{}, domain.NewUnauthorized("wrong user name or password")
	}
	s.limiter.succeed(user)
	exp := now.Add(s.cfg.SessionTTL)
	sid, tok, err := s.startSession(ctx, id, exp, false)
	if err != nil {
		return "", time.Time{}, Identity{}, err
	}
	id.SessionID = sid
	return tok, exp, id, nil
}

// startSession records a live session of id until exp and signs its token;
// sso marks a session of single sign-on, which has a record beside it.
func (s *Service) startSession(ctx context.Context, id Identity, exp time.Time, sso bool) (sid, tok string, err error) {
	sid = uuid.NewString()
	if err := s.sessions.Start(ctx, sid, id.Name); err != nil {
		return "", "", err
	}
	now := s.cfg.Now()
	tok, err = jwt.NewWithClaims(jwt.SigningMethodHS256, sessionClaims{RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "rezuscloud", Subject: id.Name, ID: sid, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
	}, UID: id.UID, SSO: sso}).SignedString(s.key)
	if err != nil {
		_ = s.sessions.End(ctx, sid)
		return "", "", fmt.Errorf("signing the session: %w", err)
	}
	return sid, tok, nil
}

// sessionExpiry reads a session token's expiry (its signature is checked).
func (s *Service) sessionExpiry(raw string) (time.Time, bool) {
	claims := &sessionClaims{}
	if _, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return s.key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithTimeFunc(s.cfg.Now)); err != nil || claims.ExpiresAt == nil {
		return time.Time{}, false
	}
	return claims.ExpiresAt.Time, true
}

// limited refuses a password check of user from client while the login
// limiter holds that address back as that user, or holds the user back and
// the address has failed as it too; an address with no failures takes the
// slow path: its password is checked.
func (s *Service) limited(now time.Time, user, client string) error {
	if wait := s.limiter.addrWait(now, client, user); wait > 0 {
		return tooManyLogins(wait)
	}
	if wait := s.limiter.userDelay(now, user); wait > 0 && !s.limiter.addrClean(now, client, user) {
		return tooManyLogins(wait)
	}
	return nil
}

// CheckCurrentPassword checks the current password a user gives to change
// it. It goes through the login limiter with the same keys (client address
// and user name) and delays, and its failures count with failed logins: a
// session or a token is no licence to guess the password behind it without
// limit. A wrong password is Invalid on field.
func (s *Service) CheckCurrentPassword(ctx context.Context, user, password, client, field string) error {
	now := s.cfg.Now()
	if err := s.limited(now, user, client); err != nil {
		return err
	}
	ok, err := s.CheckPassword(ctx, user, password)
	if err != nil {
		return err
	}
	if !ok {
		s.limiter.fail(now, user, client)
		return domain.NewInvalid(domain.UserKind.Kind, user, []domain.Cause{{Field: field, Type: domain.CauseInvalid, Message: "is not the current password"}})
	}
	s.limiter.succeed(user)
	return nil
}

func tooManyLogins(wait time.Duration) error {
	secs := int(wait.Seconds()) + 1
	return &domain.Error{Reason: domain.ReasonTooManyRequests, RetryAfterSeconds: secs,
		Message: fmt.Sprintf("too many failed logins; retry in %d seconds", secs)}
}

// Logout ends the session the request carries, if any.
func (s *Service) Logout(ctx context.Context, r *http.Request) error {
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
	if claims.SSO {
		_ = s.secrets.Delete(ctx, secretSSOSessionPrefix+claims.ID)
	}
	return s.sessions.End(ctx, claims.ID)
}
