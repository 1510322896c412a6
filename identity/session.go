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

// Login checks a password and starts a session; it returns the signed session token.
func (s *Service) Login(ctx context.Context, user, password, client string) (string, time.Time, Identity, error) {
	now := s.cfg.Now()
	if wait := s.limiter.addrWait(now, client, user); wait > 0 {
		return "", time.Time{}, Identity{}, tooManyLogins(wait)
	}
	if wait := s.limiter.userDelay(now, user); wait > 0 && !s.limiter.addrClean(now, client, user) {
		// The user is under a failure delay and this address has failed too;
		// an address with no failures takes the slow path: its password is checked.
		return "", time.Time{}, Identity{}, tooManyLogins(wait)
	}
	ok, err := s.CheckPassword(ctx, user, password)
	if err != nil {
		return "", time.Time{}, Identity{}, err
	}
	var id Identity
	if ok {
		id, _, err = s.userIdentity(user, "", AuthSession)
		ok = err == nil
	}
	if !ok {
		s.limiter.fail(now, user, client)
		return "", time.Time{}, Identity{}, domain.NewUnauthorized("wrong user name or password")
	}
	s.limiter.succeed(user)
	sid := uuid.NewString()
	if err := s.sessions.Start(ctx, sid, user); err != nil {
		return "", time.Time{}, Identity{}, err
	}
	exp := now.Add(s.cfg.SessionTTL)
	id.SessionID = sid
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, sessionClaims{RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "rezuscloud", Subject: user, ID: sid, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
	}, UID: id.UID}).SignedString(s.key)
	if err != nil {
		return "", time.Time{}, Identity{}, fmt.Errorf("signing the session: %w", err)
	}
	return tok, exp, id, nil
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
	return s.sessions.End(ctx, claims.ID)
}
