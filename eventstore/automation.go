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
	"github.com/nats-io/nkeys"

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
	PublicKey string `json:"publicKey"`
	// Account is the public key of the NATS account of these credentials
	// alone (see credentialAccountClaims); empty for credentials issued in
	// the shared AUTOMATION account before accounts were per credential.
	Account string    `json:"account,omitempty"`
	Created time.Time `json:"created"`
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

// DefaultAutomationMaxConsumers is how many consumers one automation
// credential may keep on its mirror of the event stream at once.
const DefaultAutomationMaxConsumers = 8

// AutomationConfig configures automation credentials. The zero value is usable.
type AutomationConfig struct {
	// MaxConsumers is each credential's consumer quota, enforced by the NATS
	// server as its account's JetStream consumer limit; default
	// DefaultAutomationMaxConsumers. It applies to credentials issued after
	// it is set (the limit is in each account's JWT).
	MaxConsumers int
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
	js  jetstream.JetStream
	kv  jetstream.KeyValue
}

// OpenAutomation provisions the credentials bucket in the store, and retires
// credentials of the shared account (see retireSharedAccount). It needs the
// embedded server: with an external NATS, that cluster's operator issues
// credentials.
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
	if cfg.MaxConsumers <= 0 {
		cfg.MaxConsumers = DefaultAutomationMaxConsumers
	}
	a := &Automation{cfg: cfg, emb: e, js: s.js, kv: kv}
	if err := a.retireSharedAccount(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// retireSharedAccount revokes credentials issued in the shared AUTOMATION
// account, where each could delete the others' consumers, use up their
// consumers and deliver old events to their subscribers, and removes that
// account's mirror. Their holders must be issued new credentials.
func (a *Automation) retireSharedAccount(ctx context.Context) error {
	recs, err := a.List(ctx)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.Account != "" {
			continue
		}
		a.cfg.Logger.Warn("revoking automation credentials issued in the shared account; issue new ones", "name", rec.Name, "publicKey", rec.PublicKey)
		if _, err := a.Revoke(ctx, rec.Name); err != nil {
			return err
		}
	}
	nc, err := a.emb.connectAs(a.emb.trust.automation, "rezuscloud-automation", nats.CustomInboxPrefix(automationInboxPrefix))
	if err != nil {
		return fmt.Errorf("connecting to the %s account: %w", automationAccountName, err)
	}
	defer nc.Close()
	if err := deleteEventMirror(ctx, nc); err != nil {
		return fmt.Errorf("removing the shared automation mirror: %w", err)
	}
	return nil
}

// connectCredentialAccount opens an in-process connection as a fresh user of
// a credential account, signed with the signing key all of them trust.
func (e *Embedded) connectCredentialAccount(accountPub string) (*nats.Conn, error) {
	_, token, seed, err := userJWT(e.trust.signer, "rezuscloud-automation", func(uc *jwt.UserClaims) { uc.IssuerAccount = accountPub })
	if err != nil {
		return nil, err
	}
	defer clear(seed)
	return nats.Connect("", nats.InProcessServer(e.srv), nats.Name("rezuscloud-automation"), nats.MaxReconnects(-1),
		nats.UserJWTAndSeed(token, string(seed)), nats.CustomInboxPrefix(automationInboxPrefix))
}

// deleteEventMirror removes the REZUS_EVENTS mirror of the connection's
// account, if there is one.
func deleteEventMirror(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err = retryUnavailable(ctx, func() error { return js.DeleteStream(ctx, StreamName) })
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	return nil
}

// provisionEventMirror creates (or confirms) REZUS_EVENTS in the
// connection's account: a mirror of the application account's stream, same
// name, same sequences.
func provisionEventMirror(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	js = forCluster(nc, js)
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

// automationPermissions are all an automation user may do, in its own
// account (one per credential): read the live events, and use the JetStream API of the
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
	account, err := nkeys.CreateAccount()
	if err != nil {
		return IssuedAutomationCredential{}, err
	}
	defer account.Wipe()
	accountPub, err := account.PublicKey()
	if err != nil {
		return IssuedAutomationCredential{}, err
	}
	pub, token, seed, err := userJWT(account, name, func(uc *jwt.UserClaims) {
		uc.Permissions = automationPermissions()
		uc.AllowedConnectionTypes.Add(jwt.ConnectionTypeStandard)
		// Requests are small; bound what a client may publish.
		uc.Limits.Payload = 1 << 20
	})
	if err != nil {
		return IssuedAutomationCredential{}, fmt.Errorf("issuing automation credentials %s: %w", name, err)
	}
	defer clear(seed)
	rec := AutomationCredential{Name: name, PublicKey: pub, Account: accountPub, Created: a.cfg.Now().UTC(), Creator: creator}
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
	if err := a.provisionAccount(ctx, accountPub, name); err != nil {
		// Nothing was handed out: undo, so the name can be issued again.
		if _, rerr := a.Revoke(context.WithoutCancel(ctx), name); rerr != nil {
			a.cfg.Logger.Error("undoing half-issued automation credentials", "name", name, "err", rerr)
		}
		return IssuedAutomationCredential{}, fmt.Errorf("issuing automation credentials %s: %w", name, err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return IssuedAutomationCredential{}, err
	}
	return IssuedAutomationCredential{AutomationCredential: rec, Creds: creds, URL: a.emb.ClientURL()}, nil
}

// provisionAccount makes the credential's own account and its mirror of the
// event stream. The mirror is a copy: each credential costs the event
// stream's size on disk and a write per event.
func (a *Automation) provisionAccount(ctx context.Context, accountPub, name string) error {
	if _, err := a.emb.trust.putCredentialAccount(a.emb.trust.credentialAccountClaims(accountPub, name, a.cfg.MaxConsumers)); err != nil {
		return err
	}
	nc, err := a.emb.connectCredentialAccount(accountPub)
	if err != nil {
		return fmt.Errorf("connecting to the account of %s: %w", name, err)
	}
	defer nc.Close()
	return provisionEventMirror(ctx, nc)
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
	keys, err := WholeKeys(ctx, a.js, AutomationBucket, "")
	if err != nil {
		return nil, fmt.Errorf("listing automation credentials: %w", err)
	}
	out := []AutomationCredential{}
	for _, k := range keys {
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
	if rec.Account == "" {
		err = a.emb.revokeAutomationUser(ctx, rec.PublicKey, a.cfg.Now())
	} else {
		err = a.emb.revokeCredentialAccount(ctx, rec.Account, a.cfg.Now())
	}
	if err != nil {
		return AutomationCredential{}, fmt.Errorf("revoking automation credentials %s: %w", name, err)
	}
	if err := a.kv.Purge(ctx, name); err != nil {
		return AutomationCredential{}, fmt.Errorf("forgetting automation credentials %s: %w", name, err)
	}
	return rec, nil
}

// revokeCredentialAccount removes a credential account's mirror, then
// revokes every user of the account and pushes that to the running server.
func (e *Embedded) revokeCredentialAccount(ctx context.Context, accountPub string, at time.Time) error {
	if !e.trust.hasCredentialAccount(accountPub) {
		return nil // issuing failed before the account was made: nothing to revoke
	}
	nc, err := e.connectCredentialAccount(accountPub)
	if err != nil {
		return err
	}
	err = deleteEventMirror(ctx, nc)
	nc.Close()
	if err != nil {
		return fmt.Errorf("removing the mirror: %w", err)
	}
	e.updates.Lock()
	defer e.updates.Unlock()
	signed, err := e.trust.revokeCredentialAccount(accountPub, at.Add(time.Second))
	if err != nil {
		return err
	}
	return e.pushAccount(ctx, accountPub, signed)
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
	return e.pushAccount(ctx, e.trust.automationPub, signed)
}

// pushAccount hands signed account claims to the running server through the
// system account, the way an operator's tooling does.
func (e *Embedded) pushAccount(ctx context.Context, accountPub, signed string) error {
	msg, err := e.sys.RequestWithContext(ctx, "$SYS.REQ.ACCOUNT."+accountPub+".CLAIMS.UPDATE", []byte(signed))
	if err != nil {
		return fmt.Errorf("updating account %s: %w", accountPub, err)
	}
	var resp server.ServerAPIClaimUpdateResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("updating account %s: bad answer: %w", accountPub, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("updating account %s: %s", accountPub, resp.Error.Description)
	}
	return nil
}
