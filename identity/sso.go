package identity

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// OIDCConfig configures single sign-on through an OpenID provider. RezusCloud
// is a confidential client using the authorization code flow with PKCE.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL (discovery is at
	// <Issuer>/.well-known/openid-configuration, read at the first login).
	Issuer string
	// ClientID and ClientSecret are RezusCloud's client at the provider.
	ClientID     string
	ClientSecret string
	// RedirectURL is RezusCloud's callback as registered at the provider:
	// <external URL>/api/v1/auth/sso/callback.
	RedirectURL string
	// GroupsClaim names the claim carrying the user's groups (a list of
	// strings, or one string); read from the ID token, else from userinfo.
	// Default "groups".
	GroupsClaim string
	// Scopes asked for; default openid, profile, email, offline_access and
	// groups (a provider drops those it does not know, or is told to here).
	Scopes []string
	// RefreshInterval is the longest a session goes without asking the
	// provider again (refresh grant) for the user and their groups; the ID
	// token's expiry brings the check earlier. Default 5 minutes.
	RefreshInterval time.Duration
	// HTTPClient talks to the provider; default a client with a 15 s timeout.
	HTTPClient *http.Client
}

func (c *OIDCConfig) setDefaults() {
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	if len(c.Scopes) == 0 {
		c.Scopes = []string{oidc.ScopeOpenID, "profile", "email", oidc.ScopeOfflineAccess, "groups"}
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = 5 * time.Minute
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
}

// Validate reports a configuration that cannot work.
func (c OIDCConfig) Validate() error {
	var probs []string
	if u, err := url.Parse(c.Issuer); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		probs = append(probs, "the issuer must be an http(s) URL")
	}
	if c.ClientID == "" {
		probs = append(probs, "the client id is required")
	}
	if u, err := url.Parse(c.RedirectURL); err != nil || u.Host == "" {
		probs = append(probs, "the redirect URL must be absolute")
	}
	if len(probs) > 0 {
		return errors.New("single sign-on: " + strings.Join(probs, "; "))
	}
	return nil
}

// sso is the relying party: the provider's discovery document and keys,
// read once at the first use (so a provider that is down at start-up does
// not keep the server from starting), and the refreshes in flight.
type sso struct {
	cfg OIDCConfig
	// stateKey signs the login state cookie; derived from the session key.
	stateKey []byte

	mu       sync.Mutex
	provider *oidc.Provider
	verifier *oidc.IDTokenVerifier

	refreshing sync.Map // session id -> *sync.Mutex
}

// EnableSSO turns single sign-on on with cfg.
func (s *Service) EnableSSO(cfg OIDCConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.setDefaults()
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("sso-login-state"))
	s.ssoCfg.Store(&sso{cfg: cfg, stateKey: m.Sum(nil)})
	return nil
}

// SSOEnabled reports whether single sign-on is configured.
func (s *Service) SSOEnabled() bool { return s.ssoCfg.Load() != nil }

// PasswordLogin reports whether users may log in with a password.
func (s *Service) PasswordLogin() bool { return !s.cfg.DisablePasswordLogin }

func (o *sso) ctx(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, o.cfg.HTTPClient)
}

// discover reads the provider's configuration once; a failure is retried at
// the next login.
func (o *sso) discover(ctx context.Context) (*oidc.Provider, *oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, o.verifier, nil
	}
	p, err := oidc.NewProvider(o.ctx(ctx), o.cfg.Issuer)
	if err != nil {
		return nil, nil, &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "the identity provider is not reachable: " + err.Error()}
	}
	o.provider = p
	o.verifier = p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID})
	return o.provider, o.verifier, nil
}

func (o *sso) oauth2(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, RedirectURL: o.cfg.RedirectURL,
		Endpoint: p.Endpoint(), Scopes: o.cfg.Scopes}
}

// loginState is what the state cookie carries from the start of a login to
// its callback: it binds the callback to the browser that started it.
type loginState struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	// Return is the web UI path to go back to.
	Return string `json:"r,omitempty"`
	// CLI: the loopback address of rezusctl login --sso, its PKCE challenge
	// for the one-time code and its own state.
	CLIRedirect  string `json:"cr,omitempty"`
	CLIChallenge string `json:"cc,omitempty"`
	CLIState     string `json:"cs,omitempty"`
	Expires      int64  `json:"e"`
}

// loginStateTTL bounds the time between starting a login and its callback.
const loginStateTTL = 10 * time.Minute

// SSOStateCookie carries the login state between start and callback.
const SSOStateCookie = "rezus_sso"

// SSOStart is how a login begins: where to send the browser, and the
// state cookie to set (HttpOnly, SameSite=Lax, for loginStateTTL).
type SSOStart struct {
	AuthURL string
	Cookie  string
	Expires time.Time
}

// CLILogin is the part of a login that rezusctl login --sso started.
type CLILogin struct {
	// Redirect is rezusctl's loopback address (http://127.0.0.1:<port>/...).
	Redirect string
	// Challenge is the S256 PKCE challenge of rezusctl's verifier, which the
	// one-time code is exchanged with.
	Challenge string
	// State is rezusctl's own state, handed back on the loopback redirect.
	State string
}

// StartSSO begins a login at the identity provider: for the web UI
// (returnTo, a path under /ui) or for rezusctl (cli).
func (s *Service) StartSSO(ctx context.Context, returnTo string, cli *CLILogin) (SSOStart, error) {
	o := s.ssoCfg.Load()
	if o == nil {
		return SSOStart{}, errSSOOff
	}
	p, _, err := o.discover(ctx)
	if err != nil {
		return SSOStart{}, err
	}
	st := loginState{Return: returnTo}
	if cli != nil {
		if err := checkLoopback(cli.Redirect); err != nil {
			return SSOStart{}, err
		}
		if len(cli.Challenge) != 43 || len(cli.State) == 0 || len(cli.State) > 128 {
			return SSOStart{}, domain.NewBadRequest("a CLI login needs a 43-character S256 code challenge and a state of 1 to 128 characters",
				domain.Cause{Field: "cli_challenge", Type: domain.CauseInvalid, Message: "must be a base64url S256 challenge"})
		}
		st.CLIRedirect, st.CLIChallenge, st.CLIState = cli.Redirect, cli.Challenge, cli.State
	}
	for _, f := range []*string{&st.State, &st.Nonce} {
		b, err := randomBytes(24)
		if err != nil {
			return SSOStart{}, err
		}
		*f = base64.RawURLEncoding.EncodeToString(b)
	}
	st.Verifier = oauth2.GenerateVerifier()
	exp := s.cfg.Now().Add(loginStateTTL)
	st.Expires = exp.Unix()
	raw, err := json.Marshal(st)
	if err != nil {
		return SSOStart{}, err
	}
	body := base64.RawURLEncoding.EncodeToString(raw)
	cookie := body + "." + base64.RawURLEncoding.EncodeToString(o.stateMAC(body))
	u := o.oauth2(p).AuthCodeURL(st.State, oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier))
	return SSOStart{AuthURL: u, Cookie: cookie, Expires: exp}, nil
}

var errSSOOff = &domain.Error{Reason: domain.ReasonNotFound, Message: "single sign-on is not configured on this server"}

func (o *sso) stateMAC(body string) []byte {
	m := hmac.New(sha256.New, o.stateKey)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// checkLoopback allows only a loopback http address as a CLI's redirect, so
// a login cannot be steered to hand its one-time code elsewhere (RFC 8252,
// section 7.3).
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	bad := domain.NewBadRequest("the CLI redirect must be http://127.0.0.1:<port>/..., http://[::1]:<port>/... or http://localhost:<port>/...",
		domain.Cause{Field: "cli_redirect", Type: domain.CauseInvalid, Message: "must be a loopback http address"})
	if err != nil || u.Scheme != "http" || u.User != nil || u.Port() == "" || len(raw) > 512 {
		return bad
	}
	switch u.Hostname() {
	case "127.0.0.1", "::1", "localhost":
		return nil
	}
	return bad
}

// readState checks the state cookie's signature, expiry and state.
func (o *sso) readState(now time.Time, cookie, state string) (loginState, error) {
	bad := domain.NewUnauthorized("the sign-in could not be matched to this browser or took too long; start it again")
	body, mac, ok := strings.Cut(cookie, ".")
	if !ok {
		return loginState{}, bad
	}
	want, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil || !hmac.Equal(want, o.stateMAC(body)) {
		return loginState{}, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return loginState{}, bad
	}
	var st loginState
	if json.Unmarshal(raw, &st) != nil || !now.Before(time.Unix(st.Expires, 0)) ||
		!hmac.Equal([]byte(st.State), []byte(state)) || st.State == "" {
		return loginState{}, bad
	}
	return st, nil
}

// SSOResult is the end of a login's callback: a web session, or, for a
// CLI login, where to send the browser with a one-time code.
type SSOResult struct {
	Token    string
	Expires  time.Time
	Identity Identity
	// Return is the web UI path the login started from.
	Return string
	// CLIRedirect, when set, is rezusctl's loopback address with the
	// one-time code and rezusctl's state; no session cookie is set then.
	CLIRedirect string
	// Groups were cut to domain.MaxGroupsPerIdentity, or some were dropped
	// as unusable names: said on the login's audit record.
	GroupsDropped int
}

// FinishSSO completes a login at its callback: it checks the state against
// the browser's cookie, redeems the code with the PKCE verifier, verifies the
// ID token (signature, issuer, audience, expiry, nonce), finds or creates the
// user (by issuer and subject), reads the groups and starts a session.
func (s *Service) FinishSSO(ctx context.Context, cookie, state, code string) (SSOResult, error) {
	o := s.ssoCfg.Load()
	if o == nil {
		return SSOResult{}, errSSOOff
	}
	now := s.cfg.Now()
	st, err := o.readState(now, cookie, state)
	if err != nil {
		return SSOResult{}, err
	}
	if code == "" {
		return SSOResult{}, domain.NewBadRequest("the identity provider sent no code", domain.Cause{Field: "code", Type: domain.CauseRequired, Message: "required"})
	}
	p, verifier, err := o.discover(ctx)
	if err != nil {
		return SSOResult{}, err
	}
	tok, err := o.oauth2(p).Exchange(o.ctx(ctx), code, oauth2.VerifierOption(st.Verifier))
	if err != nil {
		return SSOResult{}, domain.NewUnauthorized("the identity provider did not accept the sign-in: " + oauthMessage(err))
	}
	claims, err := o.verify(ctx, p, verifier, tok, st.Nonce)
	if err != nil {
		return SSOResult{}, err
	}
	u, err := s.ssoUser(ctx, claims)
	if err != nil {
		return SSOResult{}, err
	}
	id, _, err := s.userIdentity(u.Metadata.Name, u.Metadata.UID, AuthSession)
	if err != nil {
		return SSOResult{}, err
	}
	// The provider vouches for the user anew: the grant of this sign-in
	// becomes the user's standing, which the user's sessions and API
	// tokens follow, and a suspended user's tokens work again (it is the
	// same account: issuer and subject).
	standing := ssoStanding{UID: u.Metadata.UID, Subject: claims.Subject, Groups: claims.Groups, RefreshToken: tok.RefreshToken,
		CheckAt: o.nextCheck(now, claims.Expiry).Unix()}
	if err := s.putStanding(ctx, u.Metadata.Name, standing); err != nil {
		return SSOResult{}, err
	}
	rec := ssoSession{User: u.Metadata.Name, UID: u.Metadata.UID, Subject: claims.Subject, Groups: claims.Groups,
		CheckAt: standing.CheckAt, Standing: true}
	exp := now.Add(s.cfg.SessionTTL)
	if tok.RefreshToken == "" && claims.Expiry.Before(exp) {
		// Nothing to ask the provider again with: the session is only as
		// long as the ID token.
		exp = claims.Expiry
	}
	rec.Expires = exp.Unix()
	sid, jwtTok, err := s.startSession(ctx, id, exp, true)
	if err != nil {
		return SSOResult{}, err
	}
	if err := s.putSSOSession(ctx, sid, rec); err != nil {
		_ = s.sessions.End(ctx, sid)
		return SSOResult{}, err
	}
	id.SessionID = sid
	id = s.withGroups(id, rec.Groups)
	res := SSOResult{Token: jwtTok, Expires: exp, Identity: id, Return: st.Return, GroupsDropped: claims.Dropped}
	if st.CLIRedirect != "" {
		code, err := s.putCLICode(ctx, cliCode{Token: jwtTok, Challenge: st.CLIChallenge, Expires: now.Add(cliCodeTTL).Unix(), Session: sid})
		if err != nil {
			return SSOResult{}, err
		}
		res.Token = ""
		res.CLIRedirect = addQuery(st.CLIRedirect, url.Values{"code": {code}, "state": {st.CLIState}})
	}
	return res, nil
}

func addQuery(raw string, v url.Values) string {
	u, _ := url.Parse(raw)
	q := u.Query()
	for k, vs := range v {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// oauthMessage is the provider's error code and description, without the
// response body (which could carry anything).
func oauthMessage(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorCode != "" {
		if re.ErrorDescription != "" {
			return re.ErrorCode + ": " + re.ErrorDescription
		}
		return re.ErrorCode
	}
	if errors.As(err, &re) {
		return re.Response.Status
	}
	return "the token request failed"
}

// nextCheck is when a session asks the provider again: after the refresh
// interval, or when the ID token expires if that is sooner.
func (o *sso) nextCheck(now, idExpiry time.Time) time.Time {
	next := now.Add(o.cfg.RefreshInterval)
	if !idExpiry.IsZero() && idExpiry.Before(next) {
		next = idExpiry
	}
	return next
}

// idClaims is what RezusCloud reads from a verified ID token.
type idClaims struct {
	Issuer, Subject   string
	PreferredUsername string
	Email             string
	Name              string
	Groups            []string
	Dropped           int
	Expiry            time.Time
}

// verify checks the ID token of a token response and reads its claims;
// nonce is checked when set (the code flow), not on refresh, where the
// provider does not repeat it.
func (o *sso) verify(ctx context.Context, p *oidc.Provider, v *oidc.IDTokenVerifier, tok *oauth2.Token, nonce string) (idClaims, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return idClaims{}, domain.NewUnauthorized("the identity provider answered without an ID token")
	}
	idt, err := v.Verify(o.ctx(ctx), raw)
	if err != nil {
		return idClaims{}, domain.NewUnauthorized("the ID token is not valid: " + err.Error())
	}
	if nonce != "" && !hmac.Equal([]byte(idt.Nonce), []byte(nonce)) {
		return idClaims{}, domain.NewUnauthorized("the ID token was not issued for this sign-in (nonce)")
	}
	var all map[string]json.RawMessage
	if err := idt.Claims(&all); err != nil {
		return idClaims{}, domain.NewUnauthorized("the ID token's claims cannot be read")
	}
	c := idClaims{Issuer: idt.Issuer, Subject: idt.Subject, Expiry: idt.Expiry}
	str := func(name string) string {
		var s string
		_ = json.Unmarshal(all[name], &s)
		return s
	}
	_, hasGroups := all[o.cfg.GroupsClaim]
	if !hasGroups || str("preferred_username") == "" && str("email") == "" {
		// Many providers keep profile claims, some the groups, out of the
		// ID token: userinfo has them (when it speaks of the same subject).
		if info, err := p.UserInfo(o.ctx(ctx), oauth2.StaticTokenSource(tok)); err == nil && info.Subject == idt.Subject {
			var more map[string]json.RawMessage
			if info.Claims(&more) == nil {
				for k, v := range more {
					if _, ok := all[k]; !ok {
						all[k] = v
					}
				}
			}
		}
	}
	c.PreferredUsername, c.Email, c.Name = str("preferred_username"), str("email"), str("name")
	groups := all[o.cfg.GroupsClaim]
	c.Groups, c.Dropped = readGroups(groups)
	if c.Subject == "" || len(c.Subject) > domain.MaxSubjectLength || len(c.Issuer) > domain.MaxIssuerLength {
		return idClaims{}, domain.NewUnauthorized("the ID token's issuer or subject is not usable")
	}
	return c, nil
}

// readGroups reads a groups claim: a list of strings or one string. Names
// that could not be bound (empty, too long, control characters) are
// dropped, and at most domain.MaxGroupsPerIdentity are kept.
func readGroups(raw json.RawMessage) (groups []string, dropped int) {
	if len(raw) == 0 {
		return nil, 0
	}
	var list []string
	if json.Unmarshal(raw, &list) != nil {
		var one string
		if json.Unmarshal(raw, &one) != nil {
			return nil, 1
		}
		list = []string{one}
	}
	seen := map[string]bool{}
	for _, g := range list {
		if !domain.ValidGroupName(g) || seen[g] {
			if !seen[g] {
				dropped++
			}
			continue
		}
		if len(groups) == domain.MaxGroupsPerIdentity {
			dropped++
			continue
		}
		seen[g] = true
		groups = append(groups, g)
	}
	return groups, dropped
}

// errSSOUser wraps failures to find or create the user of a login.
func errSSOUser(err error) error { return fmt.Errorf("the user of this sign-in: %w", err) }
