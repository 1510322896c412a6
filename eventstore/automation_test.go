package eventstore_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsjwt "github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// automationEnv is an embedded server with a client listener, the store, the
// secrets bucket, the audit stream and automation credentials.
type automationEnv struct {
	dir        string
	emb        *eventstore.Embedded
	nc         *nats.Conn
	store      *eventstore.Store
	secrets    *eventstore.Secrets
	automation *eventstore.Automation
}

func startAutomationEnv(t *testing.T, dir string) *automationEnv {
	t.Helper()
	ctx := testCtx(t)
	emb, err := eventstore.StartEmbedded(eventstore.EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	env := &automationEnv{dir: dir, emb: emb}
	t.Cleanup(env.stop)
	env.nc, err = emb.Connect("test")
	require.NoError(t, err)
	env.store, err = eventstore.Open(ctx, env.nc, eventstore.Config{})
	require.NoError(t, err)
	env.secrets, err = eventstore.OpenSecrets(ctx, env.store)
	require.NoError(t, err)
	require.NoError(t, env.secrets.Put(ctx, "session-signing-key", []byte("not for automation")))
	audit, err := eventstore.OpenAudit(ctx, env.store, eventstore.AuditConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = audit.Close(context.Background()) })
	env.automation, err = eventstore.OpenAutomation(ctx, env.store, emb, eventstore.AutomationConfig{})
	require.NoError(t, err)
	return env
}

func (e *automationEnv) stop() {
	if e.nc != nil {
		e.nc.Close()
		e.nc = nil
	}
	if e.emb != nil {
		e.emb.Shutdown(context.Background())
		e.emb = nil
	}
}

// asyncErrors collects what the server reports asynchronously to a client:
// permission violations, revocation.
type asyncErrors chan error

func (ch asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	select {
	case ch <- err:
	default:
	}
}

// waitFor returns the first error that is target and mentions substr, failing
// the test if none arrives in time. Errors about other subjects are skipped.
func (ch asyncErrors) waitFor(t *testing.T, target error, substr string) error {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-ch:
			if errors.Is(err, target) && strings.Contains(err.Error(), substr) {
				return err
			}
		case <-timeout:
			t.Fatalf("no %v mentioning %q within 10s", target, substr)
			return nil
		}
	}
}

// connectWithCreds connects over TCP with a .creds file, as an external client does.
func connectWithCreds(t *testing.T, url string, creds []byte, errs asyncErrors, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.UserCredentials(credsFile(t, creds)), nats.ErrorHandler(errs.handler), nats.MaxReconnects(0)}, opts...)
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func TestAutomationCredentialsReadEventsAndNothingElse(t *testing.T) {
	ctx := testCtx(t)
	env := startAutomationEnv(t, t.TempDir())
	issued, err := env.automation.Issue(ctx, "ci-bot", "admin")
	require.NoError(t, err)
	require.NotEmpty(t, issued.URL)
	require.Contains(t, string(issued.Creds), "-----BEGIN NATS USER JWT-----")
	require.Contains(t, string(issued.Creds), "-----BEGIN USER NKEY SEED-----")

	errs := make(asyncErrors, 64)
	nc := connectWithCreds(t, issued.URL, issued.Creds, errs)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	// Live events on core NATS.
	live, err := nc.SubscribeSync(domain.SubjectPrefix + ".>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	res := mustExecute(t, ctx, env.store, createCmd(tenantRef("acme"), "uid-acme"))
	msg, err := live.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "rezus.evt.tenant._.acme", msg.Subject)
	require.Equal(t, "TenantCreated", msg.Header.Get(eventstore.HeaderEventType))

	t.Run("a durable consumer of its own, with sequences as resourceVersions", func(t *testing.T) {
		cons, err := js.CreateOrUpdateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{
			Durable: "ci-bot", FilterSubject: "rezus.evt.tenant._.*", AckPolicy: jetstream.AckExplicitPolicy,
		})
		require.NoError(t, err)
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		require.NoError(t, err)
		var got []jetstream.Msg
		for m := range batch.Messages() {
			got = append(got, m)
		}
		require.NoError(t, batch.Error())
		require.Len(t, got, 1)
		md, err := got[0].Metadata()
		require.NoError(t, err)
		require.Equal(t, res.Seq, md.Sequence.Stream, "the mirror keeps the event stream's sequences")
		require.NoError(t, got[0].DoubleAck(ctx))
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		require.Equal(t, res.Seq, info.AckFloor.Stream)
		require.NoError(t, js.DeleteConsumer(ctx, eventstore.StreamName, "ci-bot"))
	})

	t.Run("an ordered consumer and direct reads", func(t *testing.T) {
		cons, err := js.OrderedConsumer(ctx, eventstore.StreamName, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{"rezus.evt.tenant._.acme"}, DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		require.NoError(t, err)
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		require.NoError(t, err)
		require.Equal(t, "rezus.evt.tenant._.acme", m.Subject())
		stream, err := js.Stream(ctx, eventstore.StreamName)
		require.NoError(t, err)
		last, err := stream.GetLastMsgForSubject(ctx, "rezus.evt.tenant._.acme")
		require.NoError(t, err)
		require.Equal(t, res.Seq, last.Sequence)
	})

	t.Run("nothing of the application account is visible", func(t *testing.T) {
		// A durable of the application's own on the real stream: automation
		// sees the mirror, where it does not exist.
		_, err := env.store.JetStream().CreateOrUpdateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{Durable: "internal-worker"})
		require.NoError(t, err)
		_, err = js.Consumer(ctx, eventstore.StreamName, "internal-worker")
		require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
		require.ErrorIs(t, js.DeleteConsumer(ctx, eventstore.StreamName, "internal-worker"), jetstream.ErrConsumerNotFound)
		_, err = env.store.JetStream().Consumer(ctx, eventstore.StreamName, "internal-worker")
		require.NoError(t, err)
	})

	// Each forbidden action is refused by the server with a permissions
	// violation naming the subject; the client call fails.
	for _, tc := range []struct {
		name    string
		subject string // what the violation names
		do      func(ctx context.Context) error
		// async: the call itself succeeds locally (publish, subscribe); the
		// violation arrives afterwards.
		async bool
	}{
		{name: "publish an event through JetStream", subject: `Publish to "rezus.evt.tenant._.x"`,
			do: func(ctx context.Context) error {
				_, err := js.Publish(ctx, "rezus.evt.tenant._.x", []byte("{}"))
				return err
			}},
		{name: "publish an event on core NATS", subject: `Publish to "rezus.evt.tenant._.x"`, async: true,
			do: func(context.Context) error { return nc.Publish("rezus.evt.tenant._.x", []byte("{}")) }},
		{name: "open the secrets bucket", subject: `"$JS.API.STREAM.INFO.KV_rezus-secrets"`,
			do: func(ctx context.Context) error { _, err := js.KeyValue(ctx, eventstore.SecretsBucket); return err }},
		{name: "get a secret directly", subject: `"$JS.API.DIRECT.GET.KV_rezus-secrets.$KV.rezus-secrets.session-signing-key"`,
			do: func(ctx context.Context) error {
				_, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_rezus-secrets.$KV.rezus-secrets.session-signing-key", nil)
				return err
			}},
		{name: "open a projection bucket", subject: `"$JS.API.STREAM.INFO.KV_rezus-tenants"`,
			do: func(ctx context.Context) error { _, err := js.KeyValue(ctx, "rezus-tenants"); return err }},
		{name: "open the automation credentials bucket", subject: `"$JS.API.STREAM.INFO.KV_rezus-automation"`,
			do: func(ctx context.Context) error { _, err := js.KeyValue(ctx, eventstore.AutomationBucket); return err }},
		{name: "read the audit stream", subject: `"$JS.API.STREAM.INFO.REZUS_AUDIT"`,
			do: func(ctx context.Context) error { _, err := js.Stream(ctx, eventstore.AuditStreamName); return err }},
		{name: "consume the audit stream", subject: `"$JS.API.CONSUMER.CREATE.REZUS_AUDIT.`,
			do: func(ctx context.Context) error {
				_, err := js.CreateConsumer(ctx, eventstore.AuditStreamName, jetstream.ConsumerConfig{Name: "peek"})
				return err
			}},
		{name: "create a stream", subject: `"$JS.API.STREAM.CREATE.EVIL"`,
			do: func(ctx context.Context) error {
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
				return err
			}},
		{name: "delete the event stream", subject: `"$JS.API.STREAM.DELETE.REZUS_EVENTS"`,
			do: func(ctx context.Context) error { return js.DeleteStream(ctx, eventstore.StreamName) }},
		{name: "purge the event stream", subject: `"$JS.API.STREAM.PURGE.REZUS_EVENTS"`,
			do: func(ctx context.Context) error {
				_, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+eventstore.StreamName, nil)
				return err
			}},
		{name: "change the event stream", subject: `"$JS.API.STREAM.UPDATE.REZUS_EVENTS"`,
			do: func(ctx context.Context) error {
				_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: eventstore.StreamName, Subjects: []string{"x.>"}})
				return err
			}},
		{name: "delete an event", subject: `"$JS.API.STREAM.MSG.DELETE.REZUS_EVENTS"`,
			do: func(ctx context.Context) error {
				_, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+eventstore.StreamName, []byte(`{"seq":1}`))
				return err
			}},
		{name: "list streams", subject: `"$JS.API.STREAM.NAMES"`,
			do: func(ctx context.Context) error {
				names := js.StreamNames(ctx)
				for range names.Name() {
				}
				return names.Err()
			}},
		{name: "reach the application account's JetStream API", subject: `"$JS.rezus.API.CONSUMER.CREATE.REZUS_EVENTS"`,
			do: func(ctx context.Context) error {
				_, err := nc.RequestWithContext(ctx, "$JS.rezus.API.CONSUMER.CREATE.REZUS_EVENTS", []byte(`{}`))
				return err
			}},
		{name: "answer flow control", subject: `"$JS.FC.REZUS_EVENTS.x.y"`, async: true,
			do: func(context.Context) error { return nc.Publish("$JS.FC.REZUS_EVENTS.x.y", nil) }},
		{name: "subscribe to KV subjects", subject: `Subscription to "$KV.>"`, async: true,
			do: func(context.Context) error { _, err := nc.SubscribeSync("$KV.>"); return err }},
		{name: "subscribe to audit subjects", subject: `Subscription to "rezus.audit.>"`, async: true,
			do: func(context.Context) error { _, err := nc.SubscribeSync("rezus.audit.>"); return err }},
		{name: "subscribe to everything", subject: `Subscription to ">"`, async: true,
			do: func(context.Context) error { _, err := nc.SubscribeSync(">"); return err }},
		{name: "subscribe to the system account's subjects", subject: `Subscription to "$SYS.>"`, async: true,
			do: func(context.Context) error { _, err := nc.SubscribeSync("$SYS.>"); return err }},
		{name: "subscribe to the server's own inboxes", subject: `Subscription to "_REZUS_INBOX.>"`, async: true,
			do: func(context.Context) error { _, err := nc.SubscribeSync("_REZUS_INBOX.>"); return err }},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			callCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.do(callCtx) }()
			violation := errs.waitFor(t, nats.ErrPermissionViolation, tc.subject)
			t.Log(violation)
			cancel() // the refused request gets no answer: stop waiting for one
			err := <-done
			if !tc.async {
				require.Error(t, err)
			}
		})
	}

	// Refusals do not end the connection: it still reads events.
	mustExecute(t, ctx, env.store, createCmd(tenantRef("beta"), "uid-beta"))
	for {
		msg, err := live.NextMsg(10 * time.Second)
		require.NoError(t, err)
		if msg.Subject == "rezus.evt.tenant._.beta" {
			break
		}
	}
	// And nothing it tried changed anything.
	_, last, err := env.store.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, res.Seq+1, last)
	v, err := env.secrets.Get(ctx, "session-signing-key")
	require.NoError(t, err)
	require.Equal(t, "not for automation", string(v))
}

func TestAutomationCredentialsRevoked(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	env := startAutomationEnv(t, dir)
	keep, err := env.automation.Issue(ctx, "keep", "admin")
	require.NoError(t, err)
	gone, err := env.automation.Issue(ctx, "gone", "admin")
	require.NoError(t, err)

	errs := make(asyncErrors, 16)
	closed := make(chan struct{})
	nc := connectWithCreds(t, gone.URL, gone.Creds, errs, nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	require.NoError(t, nc.Flush())

	rec, err := env.automation.Revoke(ctx, "gone")
	require.NoError(t, err)
	require.Equal(t, gone.PublicKey, rec.PublicKey)
	// The server disconnects the connected client at once, and refuses it
	// when it tries to come back.
	errs.waitFor(t, nats.ErrAuthRevoked, "")
	<-closed
	_, err = nats.Connect(gone.URL, nats.UserCredentials(credsFile(t, gone.Creds)))
	require.ErrorIs(t, err, nats.ErrAuthorization)

	list, err := env.automation.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "keep", list[0].Name)
	_, err = env.automation.Revoke(ctx, "gone")
	require.True(t, domain.IsNotFound(err), "%v", err)

	// After a restart the revocation holds and the other credentials work:
	// the account keys and the revocation list are kept under the data dir.
	env.stop()
	env = startAutomationEnv(t, dir)
	url := env.emb.ClientURL()
	_, err = nats.Connect(url, nats.UserCredentials(credsFile(t, gone.Creds)))
	require.ErrorIs(t, err, nats.ErrAuthorization)
	ok := connectWithCreds(t, url, keep.Creds, make(asyncErrors, 1))
	js, err := jetstream.New(ok)
	require.NoError(t, err)
	_, err = js.Stream(ctx, eventstore.StreamName)
	require.NoError(t, err)
}

// credsFile writes credentials to a 0600 file.
func credsFile(t *testing.T, creds []byte) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "automation.creds")
	require.NoError(t, os.WriteFile(file, creds, 0o600))
	return file
}

func TestAutomationCredentialsBookkeeping(t *testing.T) {
	ctx := testCtx(t)
	env := startAutomationEnv(t, t.TempDir())
	issued := map[string][]byte{}
	for _, tc := range []struct {
		name   string
		reason domain.Reason
	}{
		{"ci-bot", ""},
		{"ci-bot", domain.ReasonAlreadyExists},
		{"", domain.ReasonInvalid},
		{"Not_A_Label", domain.ReasonInvalid},
		{"a.b", domain.ReasonInvalid},
		{"zz-last", ""},
	} {
		got, err := env.automation.Issue(ctx, tc.name, "alice")
		if tc.reason == "" {
			require.NoError(t, err, tc.name)
			issued[tc.name] = got.Creds
		} else {
			require.Equal(t, tc.reason, domain.ReasonOf(err), "%q: %v", tc.name, err)
		}
	}
	list, err := env.automation.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, []string{"ci-bot", "zz-last"}, []string{list[0].Name, list[1].Name})
	require.Equal(t, "alice", list[0].Creator)
	require.True(t, strings.HasPrefix(list[0].PublicKey, "U"))
	_, err = env.automation.Get(ctx, "nope")
	require.True(t, domain.IsNotFound(err))

	// The bucket keeps no seed.
	kv, err := env.store.JetStream().KeyValue(ctx, eventstore.AutomationBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, "ci-bot")
	require.NoError(t, err)
	// Not the seed issued, nor any user seed ("SU" and 56 base32 characters;
	// a public key is shorter, but may well contain "SU" by chance).
	seed, err := natsjwt.ParseDecoratedUserNKey(issued["ci-bot"])
	require.NoError(t, err)
	raw, err := seed.Seed()
	require.NoError(t, err)
	require.NotContains(t, string(e.Value()), string(raw))
	require.NotRegexp(t, `SU[A-Z2-7]{56}`, string(e.Value()))
	require.NotContains(t, string(e.Value()), "eyJ") // nor a JWT
}

func TestEmbeddedKeysArePrivate(t *testing.T) {
	dir := t.TempDir()
	env := startAutomationEnv(t, dir)
	_, err := env.automation.Issue(testCtx(t), "x", "admin")
	require.NoError(t, err)
	_, err = env.automation.Revoke(testCtx(t), "x")
	require.NoError(t, err)
	keys := filepath.Join(dir, eventstore.KeysDir)
	st, err := os.Stat(keys)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o700), st.Mode().Perm())
	entries, err := os.ReadDir(keys)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(t, err)
		require.Equal(t, fs.FileMode(0o600), info.Mode().Perm(), e.Name())
		name := e.Name()
		if strings.HasPrefix(name, "automation-A") && strings.HasSuffix(name, ".jwt") {
			name = "automation-<account>.jwt" // the credential's own account, kept with its revocation
		}
		names = append(names, name)
	}
	require.ElementsMatch(t, []string{"operator.nk", "sys.nk", "rezus.nk", "automation.nk", "automation-signer.nk",
		"automation-<account>.jwt"}, names, "no credentials lie on disk (issue 27): MintCredentials makes them when needed")
}

// TestEmbeddedKeepsDataFromBeforeOperatorMode starts a server the way
// earlier versions did (no accounts: JetStream data under the global
// account), then the current one on the same data dir.
func TestEmbeddedKeepsDataFromBeforeOperatorMode(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	old, err := server.NewServer(&server.Options{JetStream: true, StoreDir: filepath.Join(dir, "nats"), DontListen: true, NoSigs: true})
	require.NoError(t, err)
	go old.Start()
	require.True(t, old.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect("", nats.InProcessServer(old))
	require.NoError(t, err)
	store, err := eventstore.Open(ctx, nc, eventstore.Config{})
	require.NoError(t, err)
	res := mustExecute(t, ctx, store, createCmd(tenantRef("acme"), "uid-acme"))
	nc.Close()
	old.Shutdown()
	old.WaitForShutdown()

	emb, err := eventstore.StartEmbedded(eventstore.EmbeddedConfig{DataDir: dir})
	require.NoError(t, err)
	defer emb.Shutdown(context.Background())
	nc, err = emb.Connect("test")
	require.NoError(t, err)
	defer nc.Close()
	store, err = eventstore.Open(ctx, nc, eventstore.Config{})
	require.NoError(t, err)
	rec, err := store.Load(ctx, tenantRef("acme"))
	require.NoError(t, err)
	require.NotNil(t, rec)
	require.Equal(t, res.Seq, rec.Seq)
}
