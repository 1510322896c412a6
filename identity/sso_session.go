package identity

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Keys of single sign-on records in the secrets store (sealed at rest: they
// hold the provider's refresh tokens and one-time codes' sessions).
const (
	secretSSOSessionPrefix = "sso-session."
	secretCLICodePrefix    = "sso-code."
)

// ssoSession is what a session started by single sign-on keeps beside the
// session itself. Sessions of this version follow their user's standing
// (Standing, sso_standing.go): the provider's word on the user, shared with
// the user's API tokens. Records of earlier versions hold their own grant:
// the groups the provider reported last and the refresh token to ask it
// again with at CheckAt; the first good refresh moves that grant to the
// user's standing when the user has none.
type ssoSession struct {
	User         string   `json:"user"`
	UID          string   `json:"uid"`
	Subject      string   `json:"sub"`
	Groups       []string `json:"groups,omitempty"`
	RefreshToken string   `json:"rt,omitempty"`
	CheckAt      int64    `json:"checkAt"`
	Expires      int64    `json:"exp"`
	// Standing: the session asks the provider through its user's standing.
	Standing bool `json:"standing,omitempty"`
}

func (s *Service) putSSOSession(ctx context.Context, sid string, rec ssoSession) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := s.secrets.Put(ctx, secretSSOSessionPrefix+sid, raw); err != nil {
		return fmt.Errorf("recording the sign-in: %w", err)
	}
	return nil
}

func (s *Service) getSSOSession(ctx context.Context, sid string) (ssoSession, bool, error) {
	raw, err := s.secrets.Get(ctx, secretSSOSessionPrefix+sid)
	if errors.Is(err, eventstore.ErrSecretNotFound) {
		return ssoSession{}, false, nil
	}
	if err != nil {
		return ssoSession{}, false, fmt.Errorf("reading the sign-in: %w", err)
	}
	var rec ssoSession
	if err := json.Unmarshal(raw, &rec); err != nil {
		return ssoSession{}, false, nil
	}
	return rec, true, nil
}

// endSSOSession ends a session whose provider no longer vouches for it.
func (s *Service) endSSOSession(ctx context.Context, sid string) {
	_ = s.sessions.End(ctx, sid)
	_ = s.secrets.Delete(ctx, secretSSOSessionPrefix+sid)
}

// ssoGroups returns the groups of a session started by single sign-on,
// asking the provider again (refresh grant) when the check is due: the
// user's groups are re-read then, and a provider that refuses (the user was
// removed, disabled, or their grant revoked) ends the session and suspends
// the user's standing, so the user's API tokens end too. A provider that
// cannot be reached refuses the request (503) and changes nothing.
func (s *Service) ssoGroups(ctx context.Context, sid, user, uid string) ([]string, error) {
	ended := domain.NewUnauthorized("the single sign-on session has ended; log in again")
	rec, ok, err := s.getSSOSession(ctx, sid)
	if err != nil {
		return nil, err
	}
	if !ok || rec.User != user || rec.UID != uid {
		return nil, ended
	}
	if rec.Standing {
		st, err := s.checkStanding(ctx, user, uid)
		switch {
		case err == nil:
			return st.Groups, nil
		case errors.Is(err, errProviderDown):
			return nil, err
		case errors.Is(err, errStandingRefused), errors.Is(err, errNoStanding), errors.Is(err, errSSOOffForToken):
			// Refused, nothing left to ask with, or single sign-on turned
			// off: its sessions end with it.
			s.endSSOSession(ctx, sid)
			return nil, ended
		}
		return nil, err
	}
	return s.ownGrantGroups(ctx, sid, rec)
}

// ownGrantGroups is ssoGroups for a session of an earlier version, which
// holds its own grant.
func (s *Service) ownGrantGroups(ctx context.Context, sid string, rec ssoSession) ([]string, error) {
	ended := domain.NewUnauthorized("the single sign-on session has ended; log in again")
	now := s.cfg.Now()
	if now.Before(time.Unix(rec.CheckAt, 0)) {
		return rec.Groups, nil
	}
	o := s.ssoCfg.Load()
	if o == nil {
		// Single sign-on was turned off: its sessions end with it.
		s.endSSOSession(ctx, sid)
		return nil, ended
	}
	lk, _ := o.refreshing.LoadOrStore(sid, &sync.Mutex{})
	mu := lk.(*sync.Mutex)
	mu.Lock()
	defer mu.Unlock()
	defer o.refreshing.Delete(sid)
	rec, ok, err := s.getSSOSession(ctx, sid)
	if err != nil || !ok {
		return nil, ended
	}
	if rec.Standing || now.Before(time.Unix(rec.CheckAt, 0)) {
		return rec.Groups, nil // refreshed (or moved) by the request this one waited for
	}
	if rec.RefreshToken == "" {
		s.endSSOSession(ctx, sid)
		return nil, ended
	}
	claims, rt, err := o.refresh(ctx, rec.RefreshToken, rec.Subject)
	if errors.Is(err, errGrantRefused) {
		s.endSSOSession(ctx, sid)
		s.suspend(ctx, rec.User, rec.UID, rec.RefreshToken, err)
		return nil, ended
	}
	if err != nil {
		return nil, err
	}
	if rt == "" {
		rt = rec.RefreshToken
	}
	rec.Groups, rec.RefreshToken, rec.CheckAt = claims.Groups, rt, o.nextCheck(now, claims.Expiry).Unix()
	if _, found, err := s.standing(ctx, rec.User, rec.UID); err == nil && !found {
		// The user has no standing yet: this grant becomes it, and the
		// session follows it from now on.
		st := ssoStanding{UID: rec.UID, Subject: rec.Subject, Groups: rec.Groups, RefreshToken: rt, CheckAt: rec.CheckAt}
		if err := s.putStanding(ctx, rec.User, st); err != nil {
			return nil, err
		}
		rec.RefreshToken, rec.Standing = "", true
	}
	if err := s.putSSOSession(ctx, sid, rec); err != nil {
		return nil, err
	}
	return rec.Groups, nil
}

// cliCode is a one-time code the callback of a CLI login hands to
// rezusctl's loopback address: exchanged once, within cliCodeTTL, with the
// PKCE verifier only rezusctl holds, for the session token.
type cliCode struct {
	Token     string `json:"token"`
	Session   string `json:"sid"`
	Challenge string `json:"challenge"`
	Expires   int64  `json:"exp"`
}

const cliCodeTTL = 2 * time.Minute

func codeKey(code string) string {
	sum := sha256.Sum256([]byte(code))
	return secretCLICodePrefix + hex.EncodeToString(sum[:])
}

func (s *Service) putCLICode(ctx context.Context, c cliCode) (string, error) {
	b, err := randomBytes(32)
	if err != nil {
		return "", err
	}
	code := base64.RawURLEncoding.EncodeToString(b)
	raw, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	if err := s.secrets.Put(ctx, codeKey(code), raw); err != nil {
		return "", fmt.Errorf("recording the one-time code: %w", err)
	}
	return code, nil
}

// ExchangeCLICode redeems a CLI login's one-time code with the PKCE
// verifier whose S256 challenge started the login, for the session token.
// A code is good once: a wrong verifier spends it too, and ends the session
// it was for.
func (s *Service) ExchangeCLICode(ctx context.Context, code, verifier string) (string, time.Time, Identity, error) {
	bad := domain.NewUnauthorized("the one-time code is not valid, was used already or has expired; log in again")
	if code == "" || len(code) > 128 || verifier == "" || len(verifier) > 128 {
		return "", time.Time{}, Identity{}, bad
	}
	key := codeKey(code)
	raw, err := s.secrets.Get(ctx, key)
	if errors.Is(err, eventstore.ErrSecretNotFound) {
		return "", time.Time{}, Identity{}, bad
	}
	if err != nil {
		return "", time.Time{}, Identity{}, err
	}
	if err := s.secrets.Delete(ctx, key); err != nil {
		return "", time.Time{}, Identity{}, err
	}
	var c cliCode
	if json.Unmarshal(raw, &c) != nil || !s.cfg.Now().Before(time.Unix(c.Expires, 0)) {
		return "", time.Time{}, Identity{}, bad
	}
	if oauth2.S256ChallengeFromVerifier(verifier) != c.Challenge {
		s.endSSOSession(ctx, c.Session)
		return "", time.Time{}, Identity{}, bad
	}
	id, err := s.authenticateSession(ctx, c.Token)
	if err != nil {
		return "", time.Time{}, Identity{}, err
	}
	exp, _ := s.sessionExpiry(c.Token)
	return c.Token, exp, id, nil
}
