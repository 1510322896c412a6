package eventstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/rezuscloud/rezuscloud/domain"
)

// The embedded server runs in operator (decentralized JWT) mode, so that
// credentials for external automation can be minted and revoked at runtime
// without reloading the server. The accounts, all signed by our operator:
//
//   - SYS: the NATS system account; only our in-process connection uses it,
//     to push account updates (revocations) to the server.
//   - REZUS: the application account. Everything RezusCloud keeps is here:
//     REZUS_EVENTS, REZUS_AUDIT and every KV bucket. Its only user is the
//     server's own, minted at every start (ServerCredentialsPath).
//   - one account per automation credential (AUTOMATION-<name>), minted when
//     the credential is issued. It holds a mirror of REZUS_EVENTS, also named
//     REZUS_EVENTS (a mirror keeps the origin's sequences, so a message's
//     sequence is still the object's resourceVersion), imports the live event
//     subjects rezus.evt.>, and may keep a limited number of consumers. One
//     account per credential, because in a shared one any credential could
//     see, drain or delete the others' consumers and deliver replayed events
//     to their live subscribers (issue 13 defect 9), and subject permissions
//     can neither match a consumer-name prefix (wildcards are whole tokens),
//     count consumers, nor see a push consumer's deliver subject.
//   - AUTOMATION: the account all credentials shared before; kept only for
//     its revocation list.
//
// Why a separate account instead of automation users in REZUS with narrow
// permissions: subject permissions cannot see request bodies, and a consumer
// create request carries its deliver subject in the body. A client allowed to
// create consumers on a stream could create a push consumer that delivers
// into any subject of that account with interest, e.g. $KV.rezus-secrets.…
// (tried with nats-server 2.15: once that subject has a subscriber, delivered
// events are stored in the secrets bucket's stream), and could
// fetch from or ack the internal durable consumers by name, since consumer
// names cannot be prefix-matched in permissions. In AUTOMATION the only data
// is the mirror, so whatever a consumer there does stays among automation
// users of that account; REZUS exports to it only what the mirror and core
// subscribers need.

// KeysDir is the directory under the data dir holding the embedded server's
// operator and account seeds.
const KeysDir = "nats-keys"

// legacyCredentialsPath is where versions before issue 27 wrote the
// server's full-access credentials in plain at every start; a start removes
// the file.
func legacyCredentialsPath(dataDir string) string {
	return filepath.Join(dataDir, KeysDir, "rezuscloud.creds")
}

// MintCredentials returns the .creds text of a user of the application
// account with full access, expiring after ttl, signed with the account seed
// in dataDir: for the operator's own tools (the nats CLI, rezusbench) on the
// embedded server's listener, minted when they need one instead of lying on
// disk (`rezuscloud nats-creds`). It grants what the seed already does to
// whoever can read the data dir. A server started later revokes it.
func MintCredentials(dataDir, name string, ttl time.Duration) ([]byte, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("credentials need a lifetime, got %s", ttl)
	}
	raw, err := os.ReadFile(filepath.Join(dataDir, KeysDir, "rezus.nk"))
	if err != nil {
		return nil, fmt.Errorf("reading the account seed: %w", err)
	}
	acct, err := nkeys.FromSeed(bytes.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("reading the account seed: %w", err)
	}
	defer acct.Wipe()
	_, token, seed, err := userJWT(acct, name, func(uc *jwt.UserClaims) { uc.Expires = time.Now().Add(ttl).Unix() })
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(token, seed)
}

// Account names, as they appear in account JWTs and server logs.
const (
	systemAccountName     = "SYS"
	appAccountName        = "REZUS"
	automationAccountName = "AUTOMATION"
)

const (
	// mirrorAPIPrefix is where the AUTOMATION account sees the part of
	// REZUS's JetStream API that its mirror needs.
	mirrorAPIPrefix = "$JS.rezus.API"
	// mirrorDeliverPrefix is the subject space the mirror's consumer in REZUS
	// delivers to, exported to AUTOMATION.
	mirrorDeliverPrefix = "rezus.mirror.events"
)

// unlimitedJetStream enables JetStream for an account without limits of its own.
var unlimitedJetStream = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}

// trust is the key material and account JWTs the embedded server trusts.
type trust struct {
	operator *jwt.OperatorClaims
	resolver *server.MemAccResolver

	sys, app, automation nkeys.KeyPair
	sysPub, appPub       string
	automationPub        string

	// automationJWTPath keeps the AUTOMATION account JWT as last pushed to
	// the server: it carries the revocation list, which must survive restarts.
	automationJWTPath string

	operatorKP nkeys.KeyPair

	// signer is a signing key of every credential account (see
	// credentialAccountClaims): with it we mint our own users there, to
	// provision and remove the account's mirror. Its seed stays in dir.
	signer    nkeys.KeyPair
	signerPub string
	dir       string

	mu               sync.Mutex
	automationClaims *jwt.AccountClaims
	// credentialAccounts are the claims of each credential's account, by
	// account public key, as last signed.
	credentialAccounts map[string]*jwt.AccountClaims
}

// loadTrust reads the seeds under dir, creating what is missing, and signs
// the account JWTs. The seeds are the server's own bootstrap secrets, like a
// CA key: anyone holding the operator or an account seed can mint users, so
// they are written 0600 in a 0700 directory and never leave it. derived,
// when not nil, are the seeds a cluster node must use (by file name,
// derivedSeeds): a missing file gets its derived seed, and a file holding
// another is refused, since that node would sign other accounts than its peers.
func loadTrust(dir string, derived map[string][]byte) (*trust, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	op, err := loadOrCreateSeed(filepath.Join(dir, "operator.nk"), nkeys.PrefixByteOperator, derived["operator.nk"])
	if err != nil {
		return nil, err
	}
	t := &trust{operatorKP: op, resolver: &server.MemAccResolver{}, automationJWTPath: filepath.Join(dir, "automation.jwt"),
		dir: dir, credentialAccounts: map[string]*jwt.AccountClaims{}}
	for _, k := range []struct {
		file string
		kp   *nkeys.KeyPair
		pub  *string
	}{
		{"sys.nk", &t.sys, &t.sysPub},
		{"rezus.nk", &t.app, &t.appPub},
		{"automation.nk", &t.automation, &t.automationPub},
		{"automation-signer.nk", &t.signer, &t.signerPub},
	} {
		if *k.kp, err = loadOrCreateSeed(filepath.Join(dir, k.file), nkeys.PrefixByteAccount, derived[k.file]); err != nil {
			return nil, err
		}
		if *k.pub, err = (*k.kp).PublicKey(); err != nil {
			return nil, err
		}
	}
	opPub, err := op.PublicKey()
	if err != nil {
		return nil, err
	}
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "rezuscloud"
	oc.SystemAccount = t.sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		return nil, fmt.Errorf("signing the operator jwt: %w", err)
	}
	if t.operator, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		return nil, err
	}

	sc := jwt.NewAccountClaims(t.sysPub)
	sc.Name = systemAccountName
	if err := t.store(sc); err != nil {
		return nil, err
	}
	if err := t.store(t.appClaims(time.Now())); err != nil {
		return nil, err
	}
	revoked, err := t.persistedRevocations()
	if err != nil {
		return nil, err
	}
	t.automationClaims = t.newAutomationClaims(revoked)
	if err := t.store(t.automationClaims); err != nil {
		return nil, err
	}
	if err := t.loadCredentialAccounts(); err != nil {
		return nil, err
	}
	return t, nil
}

// appClaims is the REZUS account: JetStream without limits of its own, and
// exports of just what AUTOMATION needs. The JetStream API exports are the
// one consumer create request the mirror sends (an unfiltered mirror uses the
// subject without a consumer name; a body-less request such as a consumer
// delete is deliberately not exported) and its flow-control replies.
// Every user issued before this start is revoked: the only users are the
// server's own, minted at every start (see ServerCredentialsPath), so an old
// copy of its credentials file is worthless.
func (t *trust) appClaims(started time.Time) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(t.appPub)
	ac.Name = appAccountName
	ac.Limits.JetStreamLimits = unlimitedJetStream
	ac.Limits.DisallowBearer = true
	ac.RevokeAt(jwt.All, started.Add(-time.Second))
	ac.Exports.Add(
		&jwt.Export{Name: "resource events", Subject: domain.SubjectPrefix + ".>", Type: jwt.Stream},
		&jwt.Export{Name: "event mirror delivery", Subject: mirrorDeliverPrefix + ".>", Type: jwt.Stream},
		&jwt.Export{Name: "event mirror consumer", Subject: jwt.Subject("$JS.API.CONSUMER.CREATE." + StreamName), Type: jwt.Service},
		&jwt.Export{Name: "event mirror flow control", Subject: jwt.Subject("$JS.FC." + StreamName + ".>"), Type: jwt.Service},
	)
	return ac
}

// newAutomationClaims is the AUTOMATION account with the given revocations.
// It may hold one stream, the mirror.
func (t *trust) newAutomationClaims(revoked jwt.RevocationList) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(t.automationPub)
	ac.Name = automationAccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: 1, Consumer: -1}
	ac.Limits.DisallowBearer = true
	t.addMirrorImports(ac)
	if len(revoked) > 0 {
		ac.Revocations = revoked
	}
	return ac
}

// addMirrorImports gives an account what a mirror of REZUS_EVENTS and live
// subscribers need from REZUS.
func (t *trust) addMirrorImports(ac *jwt.AccountClaims) {
	api := "$JS.API.CONSUMER.CREATE." + StreamName
	ac.Imports.Add(
		&jwt.Import{Name: "resource events", Account: t.appPub, Subject: domain.SubjectPrefix + ".>", Type: jwt.Stream},
		&jwt.Import{Name: "event mirror delivery", Account: t.appPub, Subject: mirrorDeliverPrefix + ".>", Type: jwt.Stream},
		&jwt.Import{Name: "event mirror consumer", Account: t.appPub, Subject: jwt.Subject(api),
			LocalSubject: jwt.RenamingSubject(strings.Replace(api, "$JS.API", mirrorAPIPrefix, 1)), Type: jwt.Service},
		&jwt.Import{Name: "event mirror flow control", Account: t.appPub, Subject: jwt.Subject("$JS.FC." + StreamName + ".>"), Type: jwt.Service},
	)
}

// credentialAccountJWTPrefix starts the file names of credential accounts'
// JWTs in the keys dir: automation-<account public key>.jwt.
const credentialAccountJWTPrefix = "automation-A"

// credentialAccountClaims is the account of one automation credential: its
// own mirror of REZUS_EVENTS (the one stream it may hold), the live event
// subjects, and at most maxConsumers consumers. Accounts are NATS's unit of
// isolation: a consumer, a deliver subject or a subscription in one is
// invisible to every other, so one credential cannot see, delete or feed
// another's consumers, nor deliver replayed events to another's subscribers,
// and the consumer limit is counted by the server per account.
func (t *trust) credentialAccountClaims(pub, name string, maxConsumers int) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(pub)
	ac.Name = automationAccountName + "-" + name
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: 1, Consumer: int64(maxConsumers)}
	ac.Limits.DisallowBearer = true
	ac.SigningKeys.Add(t.signerPub)
	t.addMirrorImports(ac)
	return ac
}

// loadCredentialAccounts hands the resolver every credential account kept
// in the keys dir (revoked ones too: their revocation must hold).
func (t *trust) loadCredentialAccounts() error {
	paths, err := filepath.Glob(filepath.Join(t.dir, credentialAccountJWTPrefix+"*.jwt"))
	if err != nil {
		return err
	}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		signed := strings.TrimSpace(string(raw))
		ac, err := jwt.DecodeAccountClaims(signed)
		if err != nil {
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		if ac.Issuer != t.operator.Subject || filepath.Base(path) != credentialAccountFile(ac.Subject) {
			return fmt.Errorf("%s is not an automation account of this server's operator", path)
		}
		if err := t.resolver.Store(ac.Subject, signed); err != nil {
			return err
		}
		t.credentialAccounts[ac.Subject] = ac
	}
	return nil
}

func credentialAccountFile(pub string) string { return "automation-" + pub + ".jwt" }

// putCredentialAccount signs a credential account's claims, keeps them (on
// disk first, so they survive a crash) and hands them to the resolver. It
// returns the signed JWT for pushing to the running server.
func (t *trust) putCredentialAccount(ac *jwt.AccountClaims) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.putCredentialAccountLocked(ac)
}

func (t *trust) putCredentialAccountLocked(ac *jwt.AccountClaims) (string, error) {
	signed, err := ac.Encode(t.operatorKP)
	if err != nil {
		return "", fmt.Errorf("signing the %s account jwt: %w", ac.Name, err)
	}
	if err := writeFileAtomic(filepath.Join(t.dir, credentialAccountFile(ac.Subject)), []byte(signed+"\n")); err != nil {
		return "", err
	}
	if err := t.resolver.Store(ac.Subject, signed); err != nil {
		return "", err
	}
	t.credentialAccounts[ac.Subject] = ac
	return signed, nil
}

// hasCredentialAccount reports whether the credential account exists.
func (t *trust) hasCredentialAccount(pub string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.credentialAccounts[pub]
	return ok
}

// revokeCredentialAccount revokes every user of a credential account issued
// up to at.
func (t *trust) revokeCredentialAccount(pub string, at time.Time) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ac, ok := t.credentialAccounts[pub]
	if !ok {
		return "", fmt.Errorf("no automation account %s", pub)
	}
	ac.RevokeAt(jwt.All, at)
	return t.putCredentialAccountLocked(ac)
}

// persistedRevocations reads the revocation list from the last AUTOMATION
// account JWT written, if it is ours.
func (t *trust) persistedRevocations() (jwt.RevocationList, error) {
	raw, err := os.ReadFile(t.automationJWTPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", t.automationJWTPath, err)
	}
	ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", t.automationJWTPath, err)
	}
	if ac.Subject != t.automationPub || ac.Issuer != t.operator.Subject {
		return nil, fmt.Errorf("%s is not the automation account of this server's operator; refusing to drop its revocations", t.automationJWTPath)
	}
	return ac.Revocations, nil
}

// store signs account claims with the operator key and hands them to the resolver.
func (t *trust) store(ac *jwt.AccountClaims) error {
	_, err := t.storeJWT(ac)
	return err
}

func (t *trust) storeJWT(ac *jwt.AccountClaims) (string, error) {
	signed, err := ac.Encode(t.operatorKP)
	if err != nil {
		return "", fmt.Errorf("signing the %s account jwt: %w", ac.Name, err)
	}
	if err := t.resolver.Store(ac.Subject, signed); err != nil {
		return "", err
	}
	return signed, nil
}

// revoke adds a user to the AUTOMATION account's revocation list: every JWT
// of that user issued up to at is refused from now on. It persists the new
// account JWT before handing it to the resolver, so the revocation survives a
// crash, and returns it for pushing to the running server.
func (t *trust) revoke(userPub string, at time.Time) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.automationClaims.RevokeAt(userPub, at)
	signed, err := t.automationClaims.Encode(t.operatorKP)
	if err != nil {
		return "", fmt.Errorf("signing the %s account jwt: %w", automationAccountName, err)
	}
	if err := writeFileAtomic(t.automationJWTPath, []byte(signed+"\n")); err != nil {
		return "", err
	}
	if err := t.resolver.Store(t.automationPub, signed); err != nil {
		return "", err
	}
	return signed, nil
}

// userJWT mints a user of the account the key signs for; configure, when not
// nil, restricts it (a user without permissions may do anything in its
// account). The returned seed is the user's private key.
func userJWT(account nkeys.KeyPair, name string, configure func(*jwt.UserClaims)) (userPub, token string, seed []byte, err error) {
	u, err := nkeys.CreateUser()
	if err != nil {
		return "", "", nil, err
	}
	defer u.Wipe()
	if userPub, err = u.PublicKey(); err != nil {
		return "", "", nil, err
	}
	uc := jwt.NewUserClaims(userPub)
	uc.Name = name
	if configure != nil {
		configure(uc)
	}
	if token, err = uc.Encode(account); err != nil {
		return "", "", nil, fmt.Errorf("signing user jwt for %s: %w", name, err)
	}
	s, err := u.Seed()
	if err != nil {
		return "", "", nil, err
	}
	// Seed returns the key pair's own buffer, which Wipe zeroes.
	return userPub, token, append([]byte(nil), s...), nil
}

// loadOrCreateSeed reads an nkey seed of the given type, or writes one 0600
// (atomically, so a crash never leaves half a key): want when given, else a
// generated one. A file holding another seed than want is refused.
func loadOrCreateSeed(path string, prefix nkeys.PrefixByte, want []byte) (nkeys.KeyPair, error) {
	raw, err := os.ReadFile(path)
	if err == nil {
		seed := []byte(strings.TrimSpace(string(raw)))
		if want != nil && !bytes.Equal(seed, want) {
			return nil, fmt.Errorf("%s holds another seed than the cluster's (derived from the secrets key): "+
				"this data dir was started alone or with another secrets key, and a node signing other accounts cannot join; "+
				"start the node with an empty data dir, or give it the key the data dir was started with", path)
		}
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			return nil, fmt.Errorf("reading the seed in %s: %w", path, err)
		}
		if p, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicKey(p) || nkeys.Prefix(p) != prefix {
			return nil, fmt.Errorf("%s does not hold a seed of the expected kind", path)
		}
		return kp, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var kp nkeys.KeyPair
	if want != nil {
		kp, err = nkeys.FromSeed(want)
	} else {
		kp, err = nkeys.CreatePair(prefix)
	}
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(path, append(seed, '\n')); err != nil {
		return nil, err
	}
	return kp, nil
}

// writeFileAtomic writes data to path with mode 0600 through a temp file and a rename.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// migrateGlobalAccountStore moves JetStream data written before operator mode
// (under the global account "$G") to the application account, so upgrading
// keeps the event stream, buckets and consumers.
func migrateGlobalAccountStore(storeDir, appPub string) (bool, error) {
	jsDir := filepath.Join(storeDir, "jetstream")
	old, dst := filepath.Join(jsDir, server.DEFAULT_GLOBAL_ACCOUNT), filepath.Join(jsDir, appPub)
	if _, err := os.Stat(old); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	if _, err := os.Stat(dst); err == nil {
		return false, fmt.Errorf("both %s and %s exist; move one aside", old, dst)
	}
	if err := os.Rename(old, dst); err != nil {
		return false, fmt.Errorf("moving jetstream data to the %s account: %w", appAccountName, err)
	}
	return true, nil
}
