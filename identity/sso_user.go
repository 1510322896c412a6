package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// ssoUser finds the user of a sign-in by issuer and subject, or creates it
// with role none (its access comes from group bindings, or from what an
// admin gives it afterwards). The name is taken from the preferred user
// name or e-mail when free; a name already used by another account gets a
// suffix from the subject, so an identity provider's user can never sign in
// as a local user of the same name.
func (s *Service) ssoUser(ctx context.Context, c idClaims) (*domain.User, error) {
	ext := domain.ExternalIdentity{Issuer: c.Issuer, Subject: c.Subject}
	if u := s.userByExternal(ext); u != nil {
		return u, nil
	}
	base := userNameFrom(c)
	sum := sha256.Sum256([]byte(c.Issuer + "\x00" + c.Subject))
	suffix := hex.EncodeToString(sum[:])[:8]
	for _, name := range []string{base, trimName(base, 63-9) + "-" + suffix} {
		spec, _ := json.Marshal(domain.UserSpec{Role: domain.RoleNone, DisplayName: displayName(c), External: &ext})
		res, err := s.store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.UserKind, "", name),
			Object: &domain.Object{Spec: spec}, Actor: "system:sso", Now: s.cfg.Now(), NewUID: uuid.NewString()},
			eventstore.UpdateOptions{Hint: s.cache})
		if domain.IsAlreadyExists(err) {
			// Taken: by this account (a login racing this one) or another.
			if err := s.cache.Sync(ctx); err != nil {
				return nil, errSSOUser(err)
			}
			if u := s.userByExternal(ext); u != nil {
				return u, nil
			}
			continue
		}
		if err != nil {
			return nil, errSSOUser(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = s.cache.WaitFor(wctx, res.Seq)
		cancel()
		if err != nil {
			return nil, errSSOUser(err)
		}
		if u, ok := s.user(name); ok {
			return u, nil
		}
	}
	return nil, domain.NewConflict(domain.UserKind.Kind, base, "no free user name for this account: an admin can create its user with spec.external set")
}

// userByExternal is the user whose spec.external is ext. It reads every
// user: done once per login, never per request.
func (s *Service) userByExternal(ext domain.ExternalIdentity) *domain.User {
	users, err := projections.List[domain.User](s.cache, domain.UserKind, projections.ListOptions{})
	if err != nil {
		return nil
	}
	for _, u := range users {
		if e := u.Spec.External; e != nil && *e == ext && u.Metadata.DeletionTimestamp == nil {
			return &u
		}
	}
	return nil
}

// userNameFrom makes a user name (a DNS-1123 label) from the claims.
func userNameFrom(c idClaims) string {
	src := c.PreferredUsername
	if src == "" {
		src, _, _ = strings.Cut(c.Email, "@")
	}
	var b strings.Builder
	for _, r := range strings.ToLower(src) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := trimName(b.String(), 63)
	if name == "" || domain.ValidateName(name, "") != nil {
		return "sso-user"
	}
	return name
}

func trimName(s string, max int) string {
	if len(s) > max {
		s = s[:max]
	}
	for strings.Contains(s, "--") {
		s = strings.ReplaceAll(s, "--", "-")
	}
	return strings.Trim(s, "-")
}

func displayName(c idClaims) string {
	n := c.Name
	if n == "" {
		n = c.Email
	}
	if len(n) > 256 {
		n = n[:256]
	}
	return n
}
