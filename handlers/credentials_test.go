package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
)

// newSealedStack serves an API whose identity service seals its secrets, as
// the server's does, and keeps an audit log.
func newSealedStack(t *testing.T) (*stack, *eventstore.AuditLog) {
	t.Helper()
	s := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, err := eventstore.OpenSecrets(ctx, s.env.Store)
	require.NoError(t, err)
	// The stack's first identity service made its keys unsealed; drop them so
	// the sealing one makes its own.
	kv, err := s.env.Store.JetStream().KeyValue(ctx, eventstore.SecretsBucket)
	require.NoError(t, err)
	keys, err := kv.Keys(ctx)
	require.NoError(t, err)
	for _, k := range keys {
		require.NoError(t, plain.Delete(ctx, k))
	}
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	id, err := identity.NewService(ctx, identity.Config{StaticToken: testToken, Secrets: sealed, Now: s.clock.Now, PasswordCost: bcrypt.MinCost}, s.env.Store, s.cache)
	require.NoError(t, err)
	audit, err := eventstore.OpenAudit(ctx, s.env.Store, eventstore.AuditConfig{})
	require.NoError(t, err)
	s.srv.Close()
	s.api.StopWatches()
	s.identity = id
	s.api = handlers.New(handlers.Config{}, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector,
		Identity: id, Audit: audit})
	s.srv = httptest.NewServer(s.api.Handler())
	return s, audit
}

const osPassword = "s3cr3t-openstack-password"

func TestProviderCredentials(t *testing.T) {
	s, audit := newSealedStack(t)
	ctx := context.Background()
	body := map[string]any{"data": map[string]string{"OS_PASSWORD": osPassword, "OS_USERNAME": "rezus", "OS_AUTH_URL": "https://keystone.example:5000/v3"}}

	r := s.do(http.MethodPut, "/api/v1/credentials/openstack-prod", body)
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
	require.JSONEq(t, `{"apiVersion":"rezuscloud.io/v1","kind":"ProviderCredentials","metadata":{"name":"openstack-prod"},"keys":["OS_AUTH_URL","OS_PASSWORD","OS_USERNAME"]}`, string(r.Body))
	require.NotContains(t, string(r.Body), osPassword)

	r = s.do(http.MethodGet, "/api/v1/credentials/openstack-prod", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.NotContains(t, string(r.Body), osPassword, "values are never shown")
	require.Contains(t, string(r.Body), "OS_PASSWORD")

	got, err := s.identity.ProviderCredentials(ctx, "openstack-prod")
	require.NoError(t, err)
	require.Equal(t, body["data"], got, "the runner reads the values")

	// Replace: 200, and the old keys are gone.
	r = s.do(http.MethodPut, "/api/v1/credentials/openstack-prod", map[string]any{"data": map[string]string{"OS_TOKEN": "tok"}})
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	got, err = s.identity.ProviderCredentials(ctx, "openstack-prod")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"OS_TOKEN": "tok"}, got)
	r = s.do(http.MethodPut, "/api/v1/credentials/openstack-prod", body)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))

	// Sealed at rest, and in no stream but the secrets bucket.
	kv, err := s.env.Store.JetStream().KeyValue(ctx, eventstore.SecretsBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, "provider-credentials.openstack-prod")
	require.NoError(t, err)
	require.NotContains(t, string(e.Value()), osPassword)
	require.NotContains(t, string(e.Value()), "OS_PASSWORD")
	require.NotContains(t, s.allStoredBytes(), osPassword)

	r = s.do(http.MethodDelete, "/api/v1/credentials/openstack-prod", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	requireStatus(t, s.do(http.MethodGet, "/api/v1/credentials/openstack-prod", nil), 404, domain.ReasonNotFound)
	requireStatus(t, s.do(http.MethodDelete, "/api/v1/credentials/openstack-prod", nil), 404, domain.ReasonNotFound)
	_, err = s.identity.ProviderCredentials(ctx, "openstack-prod")
	require.True(t, domain.IsNotFound(err))

	// Audited, without values: PUT ×3 and DELETE ×2 (and the GET 404s are not writes).
	var recs []eventstore.AuditRecord
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		recs, _, err = audit.Query(ctx, eventstore.AuditQuery{Limit: 1000})
		require.NoError(c, err)
		assert.GreaterOrEqual(c, len(recs), 5)
	}, 10*time.Second, 5*time.Millisecond)
	raw, err := json.Marshal(recs)
	require.NoError(t, err)
	require.NotContains(t, string(raw), osPassword)
	for _, rec := range recs {
		require.Equal(t, "ProviderCredentials", rec.Kind)
		require.Equal(t, "openstack-prod", rec.Name)
	}
}

func TestProviderCredentialsValidation(t *testing.T) {
	s := newStack(t)
	many := map[string]string{}
	for i := range identity.MaxCredentialEntries + 1 {
		many[fmt.Sprintf("VAR_%d", i)] = "v"
	}
	for _, tc := range []struct {
		name   string
		path   string
		body   any
		code   int
		fields []string
	}{
		{"empty data", "/api/v1/credentials/c", `{"data":{}}`, 422, []string{"data"}},
		{"no data", "/api/v1/credentials/c", `{}`, 422, []string{"data"}},
		{"unknown field", "/api/v1/credentials/c", `{"data":{"A":"b"},"extra":1}`, 400, []string{"extra"}},
		{"a value that is not a string", "/api/v1/credentials/c", `{"data":{"A":1}}`, 400, []string{"data[A]"}},
		{"not JSON", "/api/v1/credentials/c", `data`, 400, nil},
		{"lower-case name", "/api/v1/credentials/c", `{"data":{"os_password":"x"}}`, 422, []string{"data[os_password]"}},
		{"name starting with a digit", "/api/v1/credentials/c", `{"data":{"1A":"x"}}`, 422, []string{"data[1A]"}},
		{"dash in name", "/api/v1/credentials/c", `{"data":{"A-B":"x"}}`, 422, []string{"data[A-B]"}},
		{"reserved names", "/api/v1/credentials/c",
			`{"data":{"TF_CLI_CONFIG_FILE":"x","TF_VAR_x":"y","TF_ENCRYPTION":"z","PATH":"/tmp","HOME":"/","LD_PRELOAD":"x","REZUSCLOUD_STATE_PASSPHRASE":"p","OK_NAME":"fine"}}`,
			422, []string{"data[HOME]", "data[LD_PRELOAD]", "data[PATH]", "data[REZUSCLOUD_STATE_PASSPHRASE]", "data[TF_CLI_CONFIG_FILE]", "data[TF_ENCRYPTION]", "data[TF_VAR_x]"}},
		{"too many", "/api/v1/credentials/c", map[string]any{"data": many}, 422, []string{"data"}},
		{"value too long", "/api/v1/credentials/c", map[string]any{"data": map[string]string{"BIG": strings.Repeat("x", identity.MaxCredentialValueBytes+1)}}, 422, []string{"data[BIG]"}},
		{"bad name in the URL", "/api/v1/credentials/Bad_Name", `{"data":{"A":"b"}}`, 400, []string{"metadata.name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(http.MethodPut, tc.path, tc.body)
			reason := domain.ReasonInvalid
			if tc.code == 400 {
				reason = domain.ReasonBadRequest
			}
			st := requireStatus(t, r, tc.code, reason)
			if tc.fields == nil {
				return
			}
			require.NotNil(t, st.Details, string(r.Body))
			var fields []string
			for _, c := range st.Details.Causes {
				fields = append(fields, c.Field)
			}
			require.Equal(t, tc.fields, fields, string(r.Body))
		})
	}
	// A full-size set is accepted: 64 values of 64 KiB.
	full := map[string]string{}
	for i := range identity.MaxCredentialEntries {
		full[fmt.Sprintf("VAR_%d", i)] = strings.Repeat("\n", identity.MaxCredentialValueBytes) // escaped to twice its size in JSON
	}
	r := s.do(http.MethodPut, "/api/v1/credentials/full", map[string]any{"data": full})
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
	got, err := s.identity.ProviderCredentials(context.Background(), "full")
	require.NoError(t, err)
	require.Equal(t, full, got)
}

func TestProviderCredentialsAreAdminOnly(t *testing.T) {
	s := newStack(t)
	for _, role := range []string{domain.RoleView, domain.RoleEdit} {
		s.createUser("u-"+role, role, "password for "+role+" user")
		tok := s.sessionToken("u-"+role, "password for "+role+" user")
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			r := s.do(m, "/api/v1/credentials/c", `{"data":{"A":"b"}}`, bearer(tok)...)
			requireStatus(t, r, 403, domain.ReasonForbidden)
		}
	}
}
