package identity

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"

	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// IssueAPIToken makes the secret of the named token of owner and stores its
// hash with the owner's uid, so the token dies with that user. The returned
// token is shown to the user once and never again.
func (s *Service) IssueAPIToken(ctx context.Context, name, owner string) (string, error) {
	u, ok := s.user(owner)
	if !ok {
		return "", domain.NewInvalid(domain.APITokenKind.Kind, name, []domain.Cause{{Field: "spec.user", Type: domain.CauseInvalid,
			Message: fmt.Sprintf("user %q does not exist", owner)}})
	}
	b, err := randomBytes(32)
	if err != nil {
		return "", err
	}
	secret := base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(secret))
	if err := s.secrets.Put(ctx, secretTokenPrefx+name, []byte(hex.EncodeToString(sum[:])+":"+u.Metadata.UID)); err != nil {
		return "", err
	}
	return APITokenPrefix + name + "_" + secret, nil
}

// RevokeAPIToken removes a token's secret: it is refused from the next request on.
func (s *Service) RevokeAPIToken(ctx context.Context, name string) error {
	return s.secrets.Delete(ctx, secretTokenPrefx+name)
}

// SetPassword hashes and stores a user's password.
func (s *Service) SetPassword(ctx context.Context, user, password string) error {
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
func (s *Service) DeletePassword(ctx context.Context, user string) error {
	return s.secrets.Delete(ctx, secretUserPrefix+user)
}

// CheckPassword reports whether password is the user's; it takes as long for an unknown user.
func (s *Service) CheckPassword(ctx context.Context, user, password string) (bool, error) {
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
