package eventstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsjwt "github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// automationClient is an external client connected with issued credentials.
type automationClient struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func connectIssued(t *testing.T, ctx context.Context, env *automationEnv, name string) automationClient {
	t.Helper()
	issued, err := env.automation.Issue(ctx, name, "admin")
	require.NoError(t, err)
	nc := connectWithCreds(t, issued.URL, issued.Creds, make(asyncErrors, 64))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return automationClient{nc: nc, js: js}
}

// fetchOne reads the next message of a pull consumer and acks it.
func fetchOne(t *testing.T, ctx context.Context, cons jetstream.Consumer) jetstream.Msg {
	t.Helper()
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	require.NoError(t, err)
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	require.NoError(t, batch.Error())
	require.Len(t, got, 1)
	require.NoError(t, got[0].DoubleAck(ctx))
	return got[0]
}

// TestAutomationCredentialsAreIsolated tries, with real credentials over a
// real connection, what one automation client could do to another when they
// shared one account (issue 13 defect 9). Each credential now has an account
// of its own with its own mirror of the event stream and a consumer quota.
func TestAutomationCredentialsAreIsolated(t *testing.T) {
	ctx := testCtx(t)
	env := startAutomationEnv(t, t.TempDir())
	a := connectIssued(t, ctx, env, "team-a")
	b := connectIssued(t, ctx, env, "team-b")
	first := mustExecute(t, ctx, env.store, createCmd(tenantRef("acme"), "uid-acme"))

	// B's legitimate durable consumer, which A will go after.
	bWorker, err := b.js.CreateOrUpdateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	require.Equal(t, "rezus.evt.tenant._.acme", fetchOne(t, ctx, bWorker).Subject())

	t.Run("A can neither read nor delete B's consumer", func(t *testing.T) {
		_, err := a.js.Consumer(ctx, eventstore.StreamName, "worker")
		require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
		require.Error(t, a.js.DeleteConsumer(ctx, eventstore.StreamName, "worker"))
		stream, err := a.js.Stream(ctx, eventstore.StreamName)
		require.NoError(t, err)
		names := stream.ConsumerNames(ctx)
		for name := range names.Name() {
			require.NotEqual(t, "worker", name, "A lists B's consumer")
		}
		require.NoError(t, names.Err())
		// B's consumer is still there, where B left it.
		info, err := bWorker.Info(ctx)
		require.NoError(t, err)
		require.Equal(t, first.Seq, info.AckFloor.Stream)
	})

	t.Run("A cannot create more consumers than its quota", func(t *testing.T) {
		for i := range eventstore.DefaultAutomationMaxConsumers {
			_, err := a.js.CreateOrUpdateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{Durable: fmt.Sprintf("a-%d", i)})
			require.NoError(t, err, "consumer %d of %d", i+1, eventstore.DefaultAutomationMaxConsumers)
		}
		_, err := a.js.CreateOrUpdateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{Durable: "one-too-many"})
		require.ErrorIs(t, err, jetstream.ErrMaximumConsumersLimit)
		// B's quota is its own: B can still make consumers.
		_, err = b.js.CreateOrUpdateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{Durable: "b-second"})
		require.NoError(t, err)
		for i := range eventstore.DefaultAutomationMaxConsumers {
			require.NoError(t, a.js.DeleteConsumer(ctx, eventstore.StreamName, fmt.Sprintf("a-%d", i)))
		}
	})

	t.Run("A cannot deliver old events onto the live subjects others read", func(t *testing.T) {
		const forged = domain.SubjectPrefix + ".tenant._.forged"
		bLive, err := b.nc.SubscribeSync(domain.SubjectPrefix + ".>")
		require.NoError(t, err)
		require.NoError(t, b.nc.Flush())
		appLive, err := env.nc.SubscribeSync(domain.SubjectPrefix + ".>")
		require.NoError(t, err)
		require.NoError(t, env.nc.Flush())
		// A watches its deliver subject too: when A has the replayed event,
		// the server has delivered it to every subscriber it reaches.
		aForged, err := a.nc.SubscribeSync(forged)
		require.NoError(t, err)
		require.NoError(t, a.nc.Flush())

		req, err := json.Marshal(map[string]any{"stream_name": eventstore.StreamName, "config": map[string]any{
			"durable_name": "forge", "deliver_subject": forged, "deliver_policy": "all", "ack_policy": "none",
		}})
		require.NoError(t, err)
		msg, err := a.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.DURABLE.CREATE."+eventstore.StreamName+".forge", req)
		require.NoError(t, err)
		t.Logf("push consumer create: %s", msg.Data)
		_, err = aForged.NextMsg(10 * time.Second) // what A did reaches A, and no one else
		require.NoError(t, err)

		// The next thing B and the application see is a real event.
		mustExecute(t, ctx, env.store, createCmd(tenantRef("after"), "uid-after"))
		for _, sub := range []*nats.Subscription{bLive, appLive} {
			got, err := sub.NextMsg(10 * time.Second)
			require.NoError(t, err)
			require.Equal(t, "rezus.evt.tenant._.after", got.Subject, "a replayed event reached a live subscriber")
		}
	})

	t.Run("each credential still reads the events with a pull consumer of its own", func(t *testing.T) {
		for _, c := range []automationClient{a, b} {
			cons, err := c.js.CreateOrUpdateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{
				Durable: "reader", FilterSubject: "rezus.evt.tenant._.acme", AckPolicy: jetstream.AckExplicitPolicy,
			})
			require.NoError(t, err)
			m := fetchOne(t, ctx, cons)
			md, err := m.Metadata()
			require.NoError(t, err)
			require.Equal(t, first.Seq, md.Sequence.Stream, "sequences are resourceVersions")
		}
		// B's first durable survived everything A tried, and reads on.
		m := fetchOne(t, ctx, bWorker)
		require.Equal(t, "rezus.evt.tenant._.after", m.Subject())
	})
}

// TestAutomationSharedAccountCredentialsRetired: credentials issued by an
// earlier version, as users of the one shared AUTOMATION account, are
// revoked at the next start.
func TestAutomationSharedAccountCredentialsRetired(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	env := startAutomationEnv(t, dir)
	// A user of the shared account and its record, as earlier versions issued them.
	raw, err := os.ReadFile(filepath.Join(dir, eventstore.KeysDir, "automation.nk"))
	require.NoError(t, err)
	account, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(raw))))
	require.NoError(t, err)
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	userPub, err := user.PublicKey()
	require.NoError(t, err)
	uc := natsjwt.NewUserClaims(userPub)
	uc.Permissions.Sub.Allow.Add(domain.SubjectPrefix + ".>")
	token, err := uc.Encode(account)
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	creds, err := natsjwt.FormatUserConfig(token, seed)
	require.NoError(t, err)
	kv, err := env.store.JetStream().KeyValue(ctx, eventstore.AutomationBucket)
	require.NoError(t, err)
	rec, err := json.Marshal(eventstore.AutomationCredential{Name: "old-bot", PublicKey: userPub, Creator: "admin"})
	require.NoError(t, err)
	_, err = kv.Create(ctx, "old-bot", rec)
	require.NoError(t, err)
	nc, err := nats.Connect(env.emb.ClientURL(), nats.UserCredentials(credsFile(t, creds)))
	require.NoError(t, err, "the old credentials work before the upgrade")
	nc.Close()

	env.stop()
	env = startAutomationEnv(t, dir)
	_, err = nats.Connect(env.emb.ClientURL(), nats.UserCredentials(credsFile(t, creds)), nats.MaxReconnects(0))
	require.ErrorIs(t, err, nats.ErrAuthorization)
	list, err := env.automation.List(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
}
