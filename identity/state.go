package identity

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// StateKind names Terraform state in errors: what state credentials guard.
const StateKind = "TerraformState"

// StateUsername is the HTTP basic-auth user name of apply credentials.
const StateUsername = "apply"

// stateTokenVersion starts every apply credential, so its format can change.
// v2 added the credential id ("i") that the live record and the state lock
// are keyed by; v1 credentials are refused.
const stateTokenVersion = "v2"

// secretStateCredPrefix keys the record of a live apply credential in the
// secrets store: a credential is accepted only while its record exists.
const secretStateCredPrefix = "tfstate-cred."

// stateClaims is what an apply credential says: which credential, whose
// state, for which apply, until when (Unix seconds).
type stateClaims struct {
	ID      string `json:"i"`
	Tenant  string `json:"t"`
	ApplyID string `json:"a"`
	Expires int64  `json:"e"`
}

// StateCredential is a verified apply credential: the apply it was issued to
// and its own id, which a state lock it takes is bound to.
type StateCredential struct {
	ApplyID string
	ID      string
}

// maxApplyIDLength bounds the apply id an apply credential carries.
const maxApplyIDLength = 256

// IssueStateCredentials returns HTTP basic-auth credentials for the state
// backend that reach only tenant's state, on behalf of applyID, until ttl
// passes or RevokeStateCredentials, whichever comes first: the user name
// StateUsername and a password that is "v2.<claims>.<HMAC-SHA256 of them>"
// (base64url), signed with a key kept in the secrets store. The claims carry
// a random credential id; a record under it in the secrets store says the
// credential is live, so every replica accepts it and a revoke is seen by all.
func (s *Service) IssueStateCredentials(ctx context.Context, tenant, applyID string, ttl time.Duration) (username, password string, err error) {
	if causes := domain.ValidateName(tenant, "tenant"); causes != nil {
		return "", "", domain.NewBadRequest("bad tenant name: "+causes[0].Message, causes...)
	}
	if applyID == "" || len(applyID) > maxApplyIDLength {
		return "", "", domain.NewBadRequest(fmt.Sprintf("the apply id must be 1 to %d bytes", maxApplyIDLength))
	}
	if ttl <= 0 {
		return "", "", domain.NewBadRequest("the credentials' lifetime must be positive")
	}
	id, err := randomBytes(16)
	if err != nil {
		return "", "", err
	}
	c := stateClaims{ID: base64.RawURLEncoding.EncodeToString(id), Tenant: tenant, ApplyID: applyID, Expires: s.cfg.Now().Add(ttl).Unix()}
	claims, err := json.Marshal(c)
	if err != nil {
		return "", "", err
	}
	s.pruneStateCredentials(ctx)
	if err := s.secrets.Put(ctx, secretStateCredPrefix+c.ID, claims); err != nil {
		return "", "", fmt.Errorf("recording the state credentials: %w", err)
	}
	body := stateTokenVersion + "." + base64.RawURLEncoding.EncodeToString(claims)
	return StateUsername, body + "." + base64.RawURLEncoding.EncodeToString(s.stateMAC(body)), nil
}

// RevokeStateCredentials ends apply credentials before they expire: the
// runner calls it when the apply they were issued to ends, whatever its
// outcome. Revoking credentials that are not valid, or already revoked, is
// not an error.
func (s *Service) RevokeStateCredentials(ctx context.Context, username, password string) error {
	c, err := s.stateClaims(username, password)
	if err != nil {
		return nil
	}
	return s.secrets.Delete(ctx, secretStateCredPrefix+c.ID)
}

// keyLister is a SecretStore that can list its keys (eventstore.SealedSecrets).
type keyLister interface {
	Keys(ctx context.Context, prefix string) ([]string, error)
}

// pruneStateCredentials removes the records of expired credentials, which a
// runner that died before revoking them left behind. Best effort.
func (s *Service) pruneStateCredentials(ctx context.Context) {
	l, ok := s.secrets.(keyLister)
	if !ok {
		return
	}
	keys, err := l.Keys(ctx, secretStateCredPrefix)
	if err != nil {
		return
	}
	now := s.cfg.Now()
	for _, k := range keys {
		raw, err := s.secrets.Get(ctx, k)
		if err != nil {
			continue
		}
		var c stateClaims
		if json.Unmarshal(raw, &c) != nil || !now.Before(time.Unix(c.Expires, 0)) {
			_ = s.secrets.Delete(ctx, k)
		}
	}
}

func (s *Service) stateMAC(body string) []byte {
	m := hmac.New(sha256.New, s.stateKey)
	m.Write([]byte(body))
	return m.Sum(nil)
}

var errBadStateCredentials = domain.NewUnauthorized("the state credentials are not valid or have expired")

// stateClaims checks the signature of apply credentials and returns their
// claims, without looking at expiry, tenant or revocation.
func (s *Service) stateClaims(username, password string) (stateClaims, error) {
	version, rest, ok := strings.Cut(password, ".")
	if subtle.ConstantTimeCompare([]byte(username), []byte(StateUsername)) != 1 || !ok || version != stateTokenVersion {
		return stateClaims{}, errBadStateCredentials
	}
	encClaims, encMAC, ok := strings.Cut(rest, ".")
	if !ok {
		return stateClaims{}, errBadStateCredentials
	}
	mac, err := base64.RawURLEncoding.DecodeString(encMAC)
	if err != nil || !hmac.Equal(mac, s.stateMAC(version+"."+encClaims)) {
		return stateClaims{}, errBadStateCredentials
	}
	raw, err := base64.RawURLEncoding.DecodeString(encClaims)
	if err != nil {
		return stateClaims{}, errBadStateCredentials
	}
	var c stateClaims
	if err := json.Unmarshal(raw, &c); err != nil || c.ApplyID == "" || c.ID == "" {
		return stateClaims{}, errBadStateCredentials
	}
	return c, nil
}

// VerifyStateCredentials checks apply credentials for tenant's state and
// returns the apply they were issued to and their id. Forged, malformed,
// expired and revoked credentials are Unauthorized; good ones for another
// tenant are Forbidden.
func (s *Service) VerifyStateCredentials(ctx context.Context, tenant, username, password string) (StateCredential, error) {
	c, err := s.stateClaims(username, password)
	if err != nil {
		return StateCredential{}, err
	}
	if !s.cfg.Now().Before(time.Unix(c.Expires, 0)) {
		return StateCredential{}, domain.NewUnauthorized("the state credentials have expired")
	}
	if c.Tenant != tenant {
		return StateCredential{}, domain.NewForbidden(StateKind, tenant, "these credentials reach only the state of tenant \""+c.Tenant+"\"")
	}
	if _, err := s.secrets.Get(ctx, secretStateCredPrefix+c.ID); err != nil {
		if errors.Is(err, eventstore.ErrSecretNotFound) {
			return StateCredential{}, domain.NewUnauthorized("the state credentials were revoked: the apply they were issued to has ended")
		}
		return StateCredential{}, fmt.Errorf("checking the state credentials: %w", err)
	}
	return StateCredential{ApplyID: c.ApplyID, ID: c.ID}, nil
}
