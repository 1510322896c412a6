package identity

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Bootstrap creates the first admin when there are no users: with password, or
// a generated one written to passwordFile (mode 0600). It returns whether it
// created the admin. It runs under a lease, so replicas starting together do
// it once, and in an order that a crash at any point leaves it to be redone on
// the next start: password hash, file, then the user.
func (s *Service) Bootstrap(ctx context.Context, password, passwordFile string) (created bool, err error) {
	leases, err := eventstore.OpenLeases(ctx, s.store, eventstore.LeaseTTL)
	if err != nil {
		return false, err
	}
	defer func() {
		if err == nil {
			s.bootstrapPending.Store(false)
		}
	}()
	err = leases.Do(ctx, "bootstrap-admin", uuid.NewString(), func(outer context.Context) error {
		if err := s.cache.Sync(outer); err != nil {
			return err
		}
		if s.cache.Count(domain.UserKind.Kind, "") > 0 {
			return nil
		}
		// Finish the writes even if shutdown begins meanwhile: they are short.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(outer), 30*time.Second)
		defer cancel()
		generated := password == ""
		if generated {
			b, err := randomBytes(18)
			if err != nil {
				return err
			}
			password = base64.RawURLEncoding.EncodeToString(b)
		}
		if causes := domain.ValidatePassword(password, "REZUSCLOUD_ADMIN_PASSWORD"); causes != nil {
			return domain.NewInvalid(domain.UserKind.Kind, "admin", causes)
		}
		if err := s.SetPassword(ctx, "admin", password); err != nil {
			return err
		}
		if generated && passwordFile != "" {
			if err := os.WriteFile(passwordFile, []byte(password+"\n"), 0o600); err != nil {
				return fmt.Errorf("writing %s: %w", passwordFile, err)
			}
		}
		res, err := s.store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.UserKind, "", "admin"),
			Object: &domain.Object{Spec: []byte(`{"role":"admin","displayName":"Administrator"}`)},
			Actor:  "system:bootstrap", Now: s.cfg.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{})
		if domain.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating the admin user: %w", err)
		}
		created = true
		// The read model stops at shutdown; do not wait for it past that.
		_ = s.cache.WaitFor(outer, res.Seq)
		return nil
	})
	return created, err
}
