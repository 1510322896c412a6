package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Terraform state lives in two buckets: TFStateBucket holds each tenant's
// state blob under the tenant's name, with its last TFStateHistory versions
// kept; TFStateLockBucket holds each tenant's lock, taken with a create that
// fails when the key exists and released with a delete conditional on the
// revision that took it, so two replicas on one NATS cannot both hold it.
const (
	TFStateBucket     = "rezus-tfstate"
	TFStateLockBucket = "rezus-tfstate-locks"
	// TFStateHistory is how many versions of a tenant's state are kept.
	TFStateHistory = 16
	// MaxStateSize is the largest state blob stored.
	MaxStateSize = 32 << 20
	// maxStoredSize bounds a stored (compressed) blob: JetStream's file store
	// refuses records over 32 MiB, subject and headers included, so blobs are
	// kept deflated. Tofu state is JSON text, which never fills 8 bits a byte,
	// so every state up to MaxStateSize deflates below this (random base64,
	// what encrypted state holds, to about 75%).
	maxStoredSize = MaxStateSize - 64<<10
)

// Headers each stored state version carries, so versions can be listed
// without reading the blobs.
const (
	headerStateSerial    = "Rezus-State-Serial"
	headerStateLineage   = "Rezus-State-Lineage"
	headerStateMD5       = "Rezus-State-Md5"
	headerStateEncrypted = "Rezus-State-Encrypted"
	headerStateSize      = "Rezus-State-Size"
	headerStateEncoding  = "Rezus-State-Encoding"
	headerKVOperation    = "KV-Operation"
	encodingDeflate      = "deflate"
)

// stateKind names the state in errors.
const stateKind = "TerraformState"

// ErrStateNotFound says a tenant has no state (never written, or deleted).
var ErrStateNotFound = errors.New("terraform state not found")

// State is a state blob and its version.
type State struct {
	Data    []byte
	Version StateVersion
}

// StateStore keeps Terraform state blobs and their locks.
type StateStore struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	states jetstream.KeyValue
	stream jetstream.Stream
	locks  jetstream.KeyValue
}

// OpenStateStore provisions the state and lock buckets.
func OpenStateStore(ctx context.Context, s *Store) (*StateStore, error) {
	states, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: TFStateBucket, Description: "terraform state blobs, one key per tenant",
		History: TFStateHistory, MaxValueSize: MaxStateSize,
		Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", TFStateBucket, err)
	}
	stream, err := s.js.Stream(ctx, "KV_"+TFStateBucket)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", TFStateBucket, err)
	}
	locks, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: TFStateLockBucket, Description: "terraform state locks, one key per tenant", History: 1,
		Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", TFStateLockBucket, err)
	}
	return &StateStore{nc: s.nc, js: s.js, states: states, stream: stream, locks: locks}, nil
}

func stateSubject(tenant string) string { return "$KV." + TFStateBucket + "." + tenant }

func checkTenant(tenant string) error {
	if causes := domain.ValidateName(tenant, "tenant"); causes != nil {
		return domain.NewBadRequest("bad tenant name: "+causes[0].Message, causes...)
	}
	return nil
}
