package apply

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/rezuscloud/rezuscloud/tofu"
)

// DecryptState decrypts a tenant's state with the key its applies encrypt
// it under (Config.StatePassphrase, else the tenant's state key).
func (w *Worker) DecryptState(ctx context.Context, tenant string, blob []byte) ([]byte, error) {
	if !tofu.StateEncrypted(blob) {
		return blob, nil
	}
	pass := w.cfg.StatePassphrase
	if pass == "" {
		if w.cfg.StateKeys == nil {
			return nil, errors.New("state encryption: neither a state passphrase nor a state key store is configured")
		}
		key, err := w.cfg.StateKeys.StateKey(ctx, tenant)
		if err != nil {
			return nil, fmt.Errorf("loading the state key: %w", err)
		}
		pass = hex.EncodeToString(key)
	}
	return tofu.DecryptState(blob, pass)
}
