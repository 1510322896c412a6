package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// StateKind names Terraform state in errors: what state credentials guard.
const StateKind = "TerraformState"

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
func (s *Service) IssueStateCredentials(tenant, applyID string, ttl time.Duration) (username, password string, err error) {
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

func (s *Service) stateMAC(body string) []byte {
	m := hmac.New(sha256.New, s.stateKey)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// VerifyStateCredentials checks apply credentials for tenant's state and
// returns the apply they were issued to. Forged, malformed and expired
// credentials are Unauthorized; good ones for another tenant are Forbidden.
func (s *Service) VerifyStateCredentials(tenant, username, password string) (applyID string, err error) {
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
		return "", domain.NewForbidden(StateKind, tenant, "these credentials reach only the state of tenant \""+c.Tenant+"\"")
	}
	return c.ApplyID, nil
}
