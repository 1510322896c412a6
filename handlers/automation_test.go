package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
)

// newAutomationStack is newStack on an embedded server that issues automation
// credentials and, when listen is set, has a client listener; with an audit log.
func newAutomationStack(t *testing.T, listen string) (*stack, *eventstore.AuditLog) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	emb, err := eventstore.StartEmbedded(eventstore.EmbeddedConfig{DataDir: dir, Listen: listen})
	require.NoError(t, err)
	nc, err := emb.Connect("test")
	if err != nil {
		emb.Shutdown(ctx)
		require.NoError(t, err)
	}
	env := &eventstoretest.Env{Dir: dir, Embedded: emb, Conn: nc}
	t.Cleanup(env.Stop)
	env.Store, err = eventstore.Open(ctx, nc, eventstore.Config{})
	require.NoError(t, err)
	audit, err := eventstore.OpenAudit(ctx, env.Store, eventstore.AuditConfig{})
	require.NoError(t, err)
	automation, err := eventstore.OpenAutomation(ctx, env.Store, emb, eventstore.AutomationConfig{})
	require.NoError(t, err)

	s := &stack{t: t, env: env, clock: &testClock{}}
	s.cache = projections.NewCache(env.Store, nil)
	s.projector = projections.NewProjector(env.Store, nil, "test")
	fin := &projections.TenantFinalizer{Cache: s.cache, Store: env.Store, Interval: 20 * time.Millisecond}
	s.identity, err = identity.NewService(ctx, identity.Config{StaticToken: testToken, Now: s.clock.Now, PasswordCost: bcrypt.MinCost}, env.Store, s.cache)
	require.NoError(t, err)
	s.api = handlers.New(handlers.Config{}, handlers.Deps{Store: env.Store, Cache: s.cache, Projector: s.projector, Finalizer: fin,
		Identity: s.identity, Audit: audit, Automation: automation})
	runCtx, stop := context.WithCancel(context.Background())
	s.cancel = stop
	for _, run := range []func(context.Context) error{s.cache.Run, s.projector.Run, fin.Run} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := run(runCtx); err != nil && runCtx.Err() == nil {
				t.Errorf("worker: %v", err)
			}
		}()
	}
	s.srv = httptest.NewServer(s.api.Handler())
	t.Cleanup(func() {
		s.close()
		_ = audit.Close(context.Background())
	})
	require.Eventually(t, func() bool { return s.cache.Ready() }, 10*time.Second, 5*time.Millisecond)
	return s, audit
}

type issuedCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name              string     `json:"name"`
		CreationTimestamp *time.Time `json:"creationTimestamp"`
	} `json:"metadata"`
	Status struct {
		PublicKey string `json:"publicKey"`
		Creator   string `json:"creator"`
	} `json:"status"`
	Creds   string `json:"creds"`
	NATSURL string `json:"natsURL"`
}

// natsErrors collects asynchronous errors the server sends a client.
type natsErrors chan error

func (ch natsErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	select {
	case ch <- err:
	default:
	}
}

func (ch natsErrors) waitFor(t *testing.T, target error, substr string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-ch:
			if errors.Is(err, target) && strings.Contains(err.Error(), substr) {
				return
			}
		case <-timeout:
			t.Fatalf("no %v mentioning %q within 10s", target, substr)
		}
	}
}

func TestAutomationCredentialsOverREST(t *testing.T) {
	s, audit := newAutomationStack(t, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	r := s.do(http.MethodPost, "/api/v1/automation-credentials", `{"metadata":{"name":"ci-bot"}}`)
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	require.Empty(t, r.Header.Get("Warning"))
	var issued issuedCredential
	require.NoError(t, json.Unmarshal(r.Body, &issued))
	require.Equal(t, "AutomationCredential", issued.Kind)
	require.Equal(t, "ci-bot", issued.Metadata.Name)
	require.NotNil(t, issued.Metadata.CreationTimestamp)
	require.Equal(t, "admin", issued.Status.Creator)
	require.True(t, strings.HasPrefix(issued.Status.PublicKey, "U"))
	require.Equal(t, s.env.Embedded.ClientURL(), issued.NATSURL)
	require.Contains(t, issued.Creds, "-----BEGIN USER NKEY SEED-----")

	// A plain nats.go client with the .creds file.
	credsFile := filepath.Join(t.TempDir(), "ci-bot.creds")
	require.NoError(t, os.WriteFile(credsFile, []byte(issued.Creds), 0o600))
	errs := make(natsErrors, 16)
	closed := make(chan struct{})
	nc, err := nats.Connect(issued.NATSURL, nats.UserCredentials(credsFile), nats.ErrorHandler(errs.handler),
		nats.MaxReconnects(0), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	require.NoError(t, err)
	defer nc.Close()
	live, err := nc.SubscribeSync("rezus.evt.tenant._.*")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{
		Durable: "ci-bot", FilterSubject: "rezus.evt.tenant._.*", DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)

	tenant := s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))

	msg, err := live.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "rezus.evt.tenant._.acme", msg.Subject)
	require.Equal(t, "TenantCreated", msg.Header.Get(eventstore.HeaderEventType))
	var ev domain.Event
	require.NoError(t, json.Unmarshal(msg.Data, &ev))
	require.Equal(t, "TenantCreated", ev.Type)
	require.Equal(t, "admin", ev.Actor)

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
	require.Equal(t, tenant.Metadata.ResourceVersion, strconv.FormatUint(md.Sequence.Stream, 10),
		"the consumer's stream sequence is the object's resourceVersion")
	require.NoError(t, got[0].DoubleAck(ctx))

	// What it may not do is refused by the server (the eventstore tests walk every case).
	require.NoError(t, nc.Publish("rezus.evt.tenant._.x", []byte("{}")))
	errs.waitFor(t, nats.ErrPermissionViolation, `Publish to "rezus.evt.tenant._.x"`)
	_, err = nc.SubscribeSync("$KV.rezus-secrets.>")
	require.NoError(t, err)
	errs.waitFor(t, nats.ErrPermissionViolation, `Subscription to "$KV.rezus-secrets.>"`)

	// Listing and reading show names and public keys, never the credentials.
	r = s.do(http.MethodGet, "/api/v1/automation-credentials", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	var list struct {
		Kind  string             `json:"kind"`
		Items []issuedCredential `json:"items"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &list))
	require.Equal(t, "AutomationCredentialList", list.Kind)
	require.Len(t, list.Items, 1)
	require.Equal(t, issued.Status.PublicKey, list.Items[0].Status.PublicKey)
	require.NotContains(t, string(r.Body), "creds")
	require.NotContains(t, string(r.Body), "SEED")
	r = s.do(http.MethodGet, "/api/v1/automation-credentials/ci-bot", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.NotContains(t, string(r.Body), "creds")

	// Revoking disconnects the client at once; it cannot come back.
	r = s.do(http.MethodDelete, "/api/v1/automation-credentials/ci-bot", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	errs.waitFor(t, nats.ErrAuthRevoked, "")
	<-closed
	_, err = nats.Connect(issued.NATSURL, nats.UserCredentials(credsFile))
	require.ErrorIs(t, err, nats.ErrAuthorization)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/automation-credentials/ci-bot", nil).Code)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodDelete, "/api/v1/automation-credentials/ci-bot", nil).Code)

	// Issuing and revoking are in the audit trail.
	var recs []eventstore.AuditRecord
	require.Eventually(t, func() bool {
		recs, _, err = audit.Query(ctx, eventstore.AuditQuery{Kind: eventstore.AutomationCredentialKind, Limit: 10})
		return err == nil && len(recs) == 3
	}, 10*time.Second, 5*time.Millisecond)
	for i, want := range []struct {
		method string
		code   int
	}{{http.MethodPost, 201}, {http.MethodDelete, 200}, {http.MethodDelete, 404}} {
		require.Equal(t, want.method, recs[i].Method)
		require.Equal(t, want.code, recs[i].Code)
		require.Equal(t, "ci-bot", recs[i].Name)
		require.Equal(t, "admin", recs[i].Actor)
	}
}

func TestAutomationCredentialsBadRequests(t *testing.T) {
	s, _ := newAutomationStack(t, "")
	require.Equal(t, http.StatusCreated, s.do(http.MethodPost, "/api/v1/automation-credentials", `{"metadata":{"name":"taken"}}`).Code)
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		reason                   domain.Reason
		field                    string
	}{
		{"name taken", http.MethodPost, "", `{"metadata":{"name":"taken"}}`, 409, domain.ReasonAlreadyExists, ""},
		{"no name", http.MethodPost, "", `{"metadata":{}}`, 422, domain.ReasonInvalid, "metadata.name"},
		{"not a label", http.MethodPost, "", `{"metadata":{"name":"CI.bot"}}`, 422, domain.ReasonInvalid, "metadata.name"},
		{"wrong kind", http.MethodPost, "", `{"kind":"User","metadata":{"name":"x"}}`, 422, domain.ReasonInvalid, "kind"},
		{"unknown field", http.MethodPost, "", `{"metadata":{"name":"x"},"spec":{"publish":">"}}`, 400, domain.ReasonBadRequest, "spec"},
		{"not json", http.MethodPost, "", `{`, 400, domain.ReasonBadRequest, ""},
		{"no body", http.MethodPost, "", ``, 400, domain.ReasonBadRequest, ""},
		{"missing", http.MethodGet, "/missing", "", 404, domain.ReasonNotFound, ""},
		{"revoke missing", http.MethodDelete, "/missing", "", 404, domain.ReasonNotFound, ""},
		{"bad name in url", http.MethodDelete, "/Bad_Name", "", 400, domain.ReasonBadRequest, "metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			r := s.do(tc.method, "/api/v1/automation-credentials"+tc.path, body)
			require.Equal(t, tc.code, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, tc.reason, st.Reason)
			if tc.field != "" {
				require.NotEmpty(t, st.Details)
				require.Equal(t, tc.field, st.Details.Causes[0].Field, string(r.Body))
			}
		})
	}
}

func TestAutomationCredentialsWithoutListener(t *testing.T) {
	s, _ := newAutomationStack(t, "")
	r := s.do(http.MethodPost, "/api/v1/automation-credentials", `{"apiVersion":"rezuscloud.io/v1","kind":"AutomationCredential","metadata":{"name":"later"}}`)
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
	require.Contains(t, r.Header.Get("Warning"), "--nats-listen")
	var issued issuedCredential
	require.NoError(t, json.Unmarshal(r.Body, &issued))
	require.Empty(t, issued.NATSURL)
	require.NotEmpty(t, issued.Creds)
}

// TestAutomationCredentialsOnExternalNATS: a server without the embedded NATS
// (no Automation) says who issues credentials instead.
func TestAutomationCredentialsOnExternalNATS(t *testing.T) {
	s := newStack(t)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		r := s.do(method, "/api/v1/automation-credentials", `{"metadata":{"name":"x"}}`)
		require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
		require.Contains(t, r.status(t).Message, "--nats-url")
	}
	r := s.do(http.MethodDelete, "/api/v1/automation-credentials/x", nil)
	require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
}
