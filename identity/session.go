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
