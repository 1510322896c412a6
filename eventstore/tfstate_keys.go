package eventstore

import (
	"context"
	"errors"
	"fmt"
)

// stateKeyPrefix names a tenant's generated state encryption key in the
// secrets bucket.
const stateKeyPrefix = "tfstate-key."

// stateKeySize is the length of a generated state key, in bytes.
const stateKeySize = 32

// StateKeys keeps one generated key per tenant that OpenTofu encrypts the
// tenant's Terraform state with when no state passphrase is configured. The
// keys are sealed like every other secret, so neither a raw read of the
// secrets bucket nor a copy of the data dir without the seal key shows them.
type StateKeys struct {
	secrets *SealedSecrets
}

// NewStateKeys keeps state keys in secrets.
func NewStateKeys(secrets *SealedSecrets) *StateKeys { return &StateKeys{secrets: secrets} }

// StateKey returns the tenant's state key, generating it on first use.
// Replicas racing to generate it all end up with the one that was stored
// first, and it stays the same across applies and restarts until
// DeleteStateKey.
func (k *StateKeys) StateKey(ctx context.Context, tenant string) ([]byte, error) {
	return tenantKey(ctx, k.secrets, stateKeyPrefix, "state key", tenant)
}

// tenantKey returns the tenant's generated key named prefix+tenant in
// secrets (what says which key, for errors), generating it on first use.
// Replicas racing to generate it all end up with the one stored first.
func tenantKey(ctx context.Context, secrets *SealedSecrets, prefix, what, tenant string) ([]byte, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	name := prefix + tenant
	for attempt := 0; ; attempt++ {
		key, err := secrets.Get(ctx, name)
		if err == nil {
			if len(key) != stateKeySize {
				return nil, fmt.Errorf("the %s of %s holds %d bytes, want %d", what, tenant, len(key), stateKeySize)
			}
			return key, nil
		}
		if !errors.Is(err, ErrSecretNotFound) {
			return nil, fmt.Errorf("reading the %s of %s: %w", what, tenant, err)
		}
		key, err = random(stateKeySize)
		if err != nil {
			return nil, err
		}
		created, err := secrets.Create(ctx, name, key)
		if err != nil {
			return nil, fmt.Errorf("storing the %s of %s: %w", what, tenant, err)
		}
		if created {
			return key, nil
		}
		if attempt >= 3 {
			return nil, fmt.Errorf("storing the %s of %s: it keeps changing", what, tenant)
		}
	}
}

// DeleteStateKey removes the tenant's state key: for a tenant whose state is
// gone. Removing a missing key is not an error.
func (k *StateKeys) DeleteStateKey(ctx context.Context, tenant string) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if err := k.secrets.Delete(ctx, stateKeyPrefix+tenant); err != nil {
		return fmt.Errorf("deleting the state key of %s: %w", tenant, err)
	}
	return nil
}
