package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// secretSSOUserPrefix keys a single sign-on user's standing at the provider
// in the secrets store (sealed at rest: it holds the refresh token).
const secretSSOUserPrefix = "sso-user."

// ssoStanding is the provider's word on a single sign-on user, kept beside
// the user: the grant of the user's latest sign-in, asked again (refresh
// grant) at CheckAt by whichever of the user's sessions or API tokens is
// used first, and the groups it reported last. An API token outlives the
// sessions it was made in, so the provider's word is the user's, not a
// session's: one grant for all, and one refusal ends them all.
//
// A record of an earlier version has no standing at all (sessions kept
// their own grant, ssoSession.RefreshToken): the user's API tokens are
// refused until the user signs in again or a live session's refresh moves
// its grant here.
type ssoStanding struct {
	UID          string   `json:"uid"`
	Subject      string   `json:"sub"`
	Groups       []string `json:"groups,omitempty"`
	RefreshToken string   `json:"rt,omitempty"`
	CheckAt      int64    `json:"checkAt"`
	// Suspended: the provider refused the grant (the user was removed or
	// disabled there, or the grant revoked). The user's sessions and API
	// tokens are refused until the user signs in through the provider again.
	Suspended bool `json:"suspended,omitempty"`
}

func (s *Service) putStanding(ctx context.Context, user string, st ssoStanding) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := s.secrets.Put(ctx, secretSSOUserPrefix+user, raw); err != nil {
		return fmt.Errorf("recording the provider's word on %s: %w", user, err)
	}
	return nil
}

// standing reads user's standing; found is false when there is none for
// this uid (none yet, or one of an earlier user of the name).
func (s *Service) standing(ctx context.Context, user, uid string) (st ssoStanding, found bool, err error) {
	raw, err := s.secrets.Get(ctx, secretSSOUserPrefix+user)
	if errors.Is(err, eventstore.ErrSecretNotFound) {
		return ssoStanding{}, false, nil
	}
	if err != nil {
		return ssoStanding{}, false, fmt.Errorf("reading the provider's word on %s: %w", user, err)
	}
	if json.Unmarshal(raw, &st) != nil || st.UID != uid {
		return ssoStanding{}, false, nil
	}
	return st, true, nil
}

var (
	// errStandingRefused: the provider no longer vouches for the user.
	errStandingRefused = domain.NewUnauthorized("the identity provider no longer vouches for this user; sign in through single sign-on again")
	// errNoStanding: nothing to ask the provider with (no sign-in since
	// the server started keeping the provider's word, or no refresh token).
	errNoStanding = domain.NewUnauthorized("the identity provider has not vouched for this user recently; sign in through single sign-on again")
	// errSSOOffForToken: single sign-on is off, so no one can vouch.
	errSSOOffForToken = domain.NewUnauthorized("single sign-on is not configured on this server: API tokens of its users are refused")
	// errProviderDown: the provider could not be asked; nothing changes.
	errProviderDown = &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "the identity provider could not confirm the user; try again"}
)

// checkStanding asks whether the provider still vouches for user: from
// the standing while its CheckAt is ahead, else by a refresh grant (one per
// user at a time in this process). A refusal suspends the standing. It
// answers the standing, or errNoStanding, errStandingRefused, errSSOOffForToken
// or errProviderDown.
func (s *Service) checkStanding(ctx context.Context, user, uid string) (ssoStanding, error) {
	st, found, err := s.standing(ctx, user, uid)
	switch {
	case err != nil:
		return ssoStanding{}, err
	case !found:
		return ssoStanding{}, errNoStanding
	case st.Suspended:
		return ssoStanding{}, errStandingRefused
	}
	now := s.cfg.Now()
	if now.Before(time.Unix(st.CheckAt, 0)) {
		return st, nil
	}
	o := s.ssoCfg.Load()
	if o == nil {
		return ssoStanding{}, errSSOOffForToken
	}
	if st.RefreshToken == "" {
		// The provider granted no refresh token: its word lasted as long
		// as the ID token of the sign-in.
		return ssoStanding{}, errNoStanding
	}
	lk, _ := o.refreshing.LoadOrStore("user:"+user, &sync.Mutex{})
	mu := lk.(*sync.Mutex)
	mu.Lock()
	defer mu.Unlock()
	defer o.refreshing.Delete("user:" + user)
	if st, found, err = s.standing(ctx, user, uid); err != nil {
		return ssoStanding{}, err
	} else if !found || st.Suspended {
		return ssoStanding{}, errStandingRefused
	}
	if now.Before(time.Unix(st.CheckAt, 0)) {
		return st, nil // refreshed by the request this one waited for
	}
	claims, rt, err := o.refresh(ctx, st.RefreshToken, st.Subject)
	if errors.Is(err, errGrantRefused) {
		s.suspend(ctx, user, uid, st.RefreshToken, err)
		return ssoStanding{}, errStandingRefused
	}
	if err != nil {
		return ssoStanding{}, err
	}
	st.Groups, st.CheckAt = claims.Groups, o.nextCheck(now, claims.Expiry).Unix()
	if rt != "" {
		st.RefreshToken = rt // providers that rotate them
	}
	if err := s.putStanding(ctx, user, st); err != nil {
		return ssoStanding{}, err
	}
	return st, nil
}

// suspend records that the provider refused user's grant rt: its sessions
// and API tokens are refused until the user signs in again. A standing
// holding another grant by now (a sign-in, or another replica's refresh,
// since rt was read) is left alone: its own grant is asked at once instead.
func (s *Service) suspend(ctx context.Context, user, uid, rt string, why error) {
	st, found, err := s.standing(ctx, user, uid)
	if err != nil {
		s.cfg.Log.Warn("single sign-on refresh refused; the user's standing could not be read", "user", user, "err", err)
		return
	}
	if found && !st.Suspended && st.RefreshToken != "" && st.RefreshToken != rt {
		st.CheckAt = 0
		_ = s.putStanding(ctx, user, st)
		return
	}
	if !found {
		st = ssoStanding{UID: uid}
	}
	st.Suspended, st.RefreshToken, st.Groups = true, "", nil
	if err := s.putStanding(ctx, user, st); err != nil {
		s.cfg.Log.Warn("single sign-on refresh refused; suspending the user failed", "user", user, "err", err)
		return
	}
	s.cfg.Log.Info("single sign-on refresh refused; the user's sessions and API tokens are suspended until the next sign-in",
		"user", user, "err", why)
}

// errGrantRefused: the provider answered a refresh with no (a 4xx answer
// such as invalid_grant), or with an ID token that is not valid or names
// someone else.
var errGrantRefused = errors.New("the identity provider refused the grant")

// refresh asks the provider again with a refresh token: it answers the new
// ID token's claims and the new refresh token (empty when not rotated),
// errGrantRefused, or errProviderDown when the provider could not answer
// (unreachable, or a 5xx).
func (o *sso) refresh(ctx context.Context, rt, subject string) (idClaims, string, error) {
	p, verifier, err := o.discover(ctx)
	if err != nil {
		return idClaims{}, "", errProviderDown
	}
	tok, err := o.oauth2(p).TokenSource(o.ctx(ctx), &oauth2.Token{RefreshToken: rt}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode >= http.StatusBadRequest && re.Response.StatusCode < http.StatusInternalServerError {
			return idClaims{}, "", fmt.Errorf("%w: %s", errGrantRefused, oauthMessage(err))
		}
		return idClaims{}, "", errProviderDown
	}
	claims, err := o.verify(ctx, p, verifier, tok, "")
	if err != nil {
		return idClaims{}, "", fmt.Errorf("%w: %v", errGrantRefused, err)
	}
	if claims.Subject != subject {
		return idClaims{}, "", fmt.Errorf("%w: the ID token names another subject", errGrantRefused)
	}
	if tok.RefreshToken == rt {
		return claims, "", nil
	}
	return claims, tok.RefreshToken, nil
}

// tokenOwnerVouched refuses an API token of a single sign-on user unless
// the provider still vouches for the user (checkStanding): access ends
// when access at the provider ends, for the CI job's token as for the
// browser's session.
func (s *Service) tokenOwnerVouched(ctx context.Context, owner *domain.User) error {
	if owner.Spec.External == nil {
		return nil
	}
	_, err := s.checkStanding(ctx, owner.Metadata.Name, owner.Metadata.UID)
	return err
}
