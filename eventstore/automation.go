package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// AutomationBucket holds the metadata of issued automation credentials:
// name, user public key, creation time and creator. Never seeds: those are
// shown once and forgotten. It is in the application account, which
// automation users cannot reach.
const AutomationBucket = "rezus-automation"

// AutomationCredentialKind names automation credentials in answers, errors and audit records.
const AutomationCredentialKind = "AutomationCredential"

// automationInboxPrefix is the inbox prefix of our own connection to the
// AUTOMATION account, outside the _INBOX.> automation users may read.
const automationInboxPrefix = "_REZUS_INBOX"

// AutomationCredential describes issued credentials. It holds nothing secret.
type AutomationCredential struct {
	// Name is a DNS-1123 label, unique among automation credentials.
	Name string `json:"name"`
	// PublicKey is the NATS user's public nkey (U…), the subject of its JWT and
	// the key that revoking puts on the account's revocation list.
	PublicKey string    `json:"publicKey"`
	Created   time.Time `json:"created"`
	// Creator is the identity that issued them.
	Creator string `json:"creator"`
}

// IssuedAutomationCredential is what issuing answers, once.
type IssuedAutomationCredential struct {
	AutomationCredential
	// Creds is a NATS .creds file: the user JWT and the user's seed. It is not
	// kept anywhere; whoever holds it can connect as the user until revoked.
	Creds []byte
	// URL is the embedded server's client URL, or "" when it has no listener.
	URL string
}

// AutomationConfig configures automation credentials. The zero value is usable.
type AutomationConfig struct {
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; nil means the store's logger.
	Logger *slog.Logger
}

// Automation issues, lists and revokes NATS credentials for external
// automation on the embedded server. What they allow is automationPermissions.
type Automation struct {
	cfg AutomationConfig
	emb *Embedded
	kv  jetstream.KeyValue
}

// OpenAutomation provisions the credentials bucket in the store and the
// mirror of the event stream in the AUTOMATION account. It needs the embedded
// server: with an external NATS, that cluster's operator issues credentials.
func OpenAutomation(ctx context.Context, s *Store, e *Embedded, cfg AutomationConfig) (*Automation, error) {
	if e == nil {
		return nil, errors.New("automation credentials need the embedded NATS server")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = s.cfg.Logger
	}
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: AutomationBucket, Description: "automation credentials: names and public keys, never seeds", History: 1,
		Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", AutomationBucket, err)
	}
	// The mirror costs a JetStream write per event, so it exists only once
	// credentials have been issued; made later, it copies the stream from the start.
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("reading %s: %w", AutomationBucket, err)
	}
	if len(keys) > 0 {
		if err := e.provisionEventMirror(ctx); err != nil {
			return nil, err
		}
	}
	return &Automation{cfg: cfg, emb: e, kv: kv}, nil
}

// provisionEventMirror creates (or confirms) REZUS_EVENTS in the AUTOMATION
// account: a mirror of the application account's stream, same name, same
// sequences.
func (e *Embedded) provisionEventMirror(ctx context.Context) error {
	nc, err := e.connectAs(e.trust.automation, "rezuscloud-automation", nats.CustomInboxPrefix(automationInboxPrefix))
	if err != nil {
		return fmt.Errorf("connecting to the automation account: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err = retryUnavailable(ctx, func() error {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        StreamName,
			Description: "mirror of the RezusCloud resource events, for automation credentials",
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Replicas:    1,
			AllowDirect: true,
			DenyDelete:  true,
			DenyPurge:   true,
			Mirror: &jetstream.StreamSource{Name: StreamName, External: &jetstream.ExternalStream{
				APIPrefix: mirrorAPIPrefix, DeliverPrefix: mirrorDeliverPrefix,
			}},
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("provisioning the automation mirror of %s: %w", StreamName, err)
	}
	return nil
}

// automationPermissions are all an automation user may do, in the
// AUTOMATION account: read the live events, and use the JetStream API of the
// REZUS_EVENTS mirror to read it and to keep consumers on it. Everything not
// listed is refused by the server. There are no response permissions: the
// users answer no requests (acks are publishes to $JS.ACK, allowed as such).
// Flow-control replies ($JS.FC) are not allowed, so push consumers with flow
// control stall: automation uses pull consumers (nats.go's jetstream package
// does, ordered consumers included).
func automationPermissions() jwt.Permissions {
	var p jwt.Permissions
	api := "$JS.API."
	p.Pub.Allow.Add(
		api+"INFO",
		api+"STREAM.INFO."+StreamName,
		api+"STREAM.MSG.GET."+StreamName,
		api+"DIRECT.GET."+StreamName,
		api+"DIRECT.GET."+StreamName+".>",
		api+"CONSUMER.CREATE."+StreamName,
		api+"CONSUMER.CREATE."+StreamName+".>",
		api+"CONSUMER.DURABLE.CREATE."+StreamName+".*",
		api+"CONSUMER.INFO."+StreamName+".*",
		api+"CONSUMER.DELETE."+StreamName+".*",
		api+"CONSUMER.MSG.NEXT."+StreamName+".*",
		api+"CONSUMER.NAMES."+StreamName,
		api+"CONSUMER.LIST."+StreamName,
		"$JS.ACK."+StreamName+".>",
	)
	p.Sub.Allow.Add(domain.SubjectPrefix+".>", nats.InboxPrefix+">")
	return p
}

// Issue mints credentials named name for creator. The answer carries the
// user's seed, which is not stored: it cannot be shown again.
func (a *Automation) Issue(ctx context.Context, name, creator string) (IssuedAutomationCredential, error) {
	if causes := domain.ValidateName(name, "metadata.name"); causes != nil {
		return IssuedAutomationCredential{}, domain.NewInvalid(AutomationCredentialKind, name, causes)
	}
	if err := a.emb.provisionEventMirror(ctx); err != nil {
		return IssuedAutomationCredential{}, err
	}
	pub, token, seed, err := userJWT(a.emb.trust.automation, name, func(uc *jwt.UserClaims) {
		uc.Permissions = automationPermissions()
		uc.AllowedConnectionTypes.Add(jwt.ConnectionTypeStandard)
		// Requests are small; bound what a client may publish.
		uc.Limits.Payload = 1 << 20
	})
	if err != nil {
		return IssuedAutomationCredential{}, fmt.Errorf("issuing automation credentials %s: %w", name, err)
	}
	defer clear(seed)
	rec := AutomationCredential{Name: name, PublicKey: pub, Created: a.cfg.Now().UTC(), Creator: creator}
	raw, err := json.Marshal(rec)
	if err != nil {
		return IssuedAutomationCredential{}, err
	}
	if _, err := a.kv.Create(ctx, name, raw); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return IssuedAutomationCredential{}, domain.NewAlreadyExists(AutomationCredentialKind, name)
		}
		return IssuedAutomationCredential{}, fmt.Errorf("recording automation credentials %s: %w", name, err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return IssuedAutomationCredential{}, err
	}
	return IssuedAutomationCredential{AutomationCredential: rec, Creds: creds, URL: a.emb.ClientURL()}, nil
}

// Get returns the metadata of the named credentials.
func (a *Automation) Get(ctx context.Context, name string) (AutomationCredential, error) {
	e, err := a.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return AutomationCredential{}, domain.NewNotFound(AutomationCredentialKind, name)
	}
	if err != nil {
		return AutomationCredential{}, fmt.Errorf("reading automation credentials %s: %w", name, err)
	}
	var rec AutomationCredential
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return AutomationCredential{}, fmt.Errorf("decoding automation credentials %s: %w", name, err)
	}
	return rec, nil
}

// List returns the metadata of every issued (not revoked) credential, by name.
func (a *Automation) List(ctx context.Context) ([]AutomationCredential, error) {
	keys, err := a.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing automation credentials: %w", err)
	}
	defer keys.Stop()
	out := []AutomationCredential{}
	for k := range keys.Keys() {
		rec, err := a.Get(ctx, k)
		if domain.IsNotFound(err) {
			continue // revoked meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Revoke puts the named credentials' user on the automation account's
// revocation list, which the server applies at once: a connected client is
// disconnected ("authentication revoked") and can no longer connect. Then it
// forgets the credentials. Revoking is safe to retry.
func (a *Automation) Revoke(ctx context.Context, name string) (AutomationCredential, error) {
	rec, err := a.Get(ctx, name)
	if err != nil {
		return AutomationCredential{}, err
	}
	if err := a.emb.revokeAutomationUser(ctx, rec.PublicKey, a.cfg.Now()); err != nil {
		return AutomationCredential{}, fmt.Errorf("revoking automation credentials %s: %w", name, err)
	}
	if err := a.kv.Purge(ctx, name); err != nil {
		return AutomationCredential{}, fmt.Errorf("forgetting automation credentials %s: %w", name, err)
	}
	return rec, nil
}

// revokeAutomationUser revokes a user of the AUTOMATION account and pushes
// the account update to the running server through the system account, the
// way an operator's tooling does. Updates are serialised: each carries every
// revocation so far, and an older one must not land after a newer one.
func (e *Embedded) revokeAutomationUser(ctx context.Context, userPub string, at time.Time) error {
	e.updates.Lock()
	defer e.updates.Unlock()
	signed, err := e.trust.revoke(userPub, at)
	if err != nil {
		return err
	}
	msg, err := e.sys.RequestWithContext(ctx, "$SYS.REQ.ACCOUNT."+e.trust.automationPub+".CLAIMS.UPDATE", []byte(signed))
	if err != nil {
		return fmt.Errorf("updating the %s account: %w", automationAccountName, err)
	}
	var resp server.ServerAPIClaimUpdateResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("updating the %s account: bad answer: %w", automationAccountName, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("updating the %s account: %s", automationAccountName, resp.Error.Description)
	}
	return nil
}
