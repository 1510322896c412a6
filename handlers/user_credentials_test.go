package handlers_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// TestPerUserCredentials: every role on a tenant gets cluster credentials
// of that role only, short-lived: a kubeconfig without a key whose exec
// plugin asks for a certificate of the caller (CN the user, O the group of
// the role), a talosconfig with the Talos role of the role. A caller without
// a role on the tenant gets nothing (404); the break-glass system:masters
// kubeconfig is for global admins only. Every issuance is audited.
func TestPerUserCredentials(t *testing.T) {
	s := newTalosStack(t)
	s.acme()
	s.mustCreate("/api/v1/tenants", tenantBody("other", nil))
	r := s.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp1/config", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	cp, err := configloader.NewFromBytes(r.Body)
	require.NoError(t, err)
	kubeCA, osCA := cp.Cluster().IssuingCA().Crt, cp.Machine().Security().IssuingCA().Crt

	tokens := map[string][]string{
		"vic":  bearer(s.createBoundUser("vic", domain.RoleNone, `[{"role":"view","tenants":["acme"]}]`)),
		"ed":   bearer(s.createBoundUser("ed", domain.RoleNone, `[{"role":"edit","tenants":["acme"]}]`)),
		"tina": bearer(s.createBoundUser("tina", domain.RoleNone, `[{"role":"admin","tenants":["acme"]}]`)),
		"boss": bearer(s.createBoundUser("boss", domain.RoleAdmin, `[]`)),
		"oz":   bearer(s.createBoundUser("oz", domain.RoleNone, `[{"role":"admin","tenants":["other"]}]`)),
	}
	for _, tc := range []struct {
		user, group, talosRole string
	}{
		{"vic", "rezuscloud:view", "os:reader"},
		// os:admin reads the machine config (every CA key) and mints a
		// year-long system:masters kubeconfig; os:operator takes etcd
		// snapshots: global admins only (issue 42, finding 1).
		{"ed", "rezuscloud:edit", "os:reader"},
		{"tina", "rezuscloud:admin", "os:reader"},
		{"boss", "rezuscloud:admin", "os:admin"},
	} {
		t.Run(tc.user, func(t *testing.T) {
			before := time.Now()
			r := s.do(http.MethodPost, "/api/v1/tenants/acme/kubernetes/credential", nil, tokens[tc.user]...)
			require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
			var ec struct {
				APIVersion, Kind string
				Status           struct {
					ExpirationTimestamp   time.Time
					ClientCertificateData string
					ClientKeyData         string
				}
			}
			require.NoError(t, json.Unmarshal(r.Body, &ec))
			require.Equal(t, "client.authentication.k8s.io/v1", ec.APIVersion)
			require.Equal(t, "ExecCredential", ec.Kind)
			require.Contains(t, ec.Status.ClientKeyData, "PRIVATE KEY")
			c := verifyClientCert(t, kubeCA, []byte(ec.Status.ClientCertificateData))
			require.Equal(t, tc.user, c.Subject.CommonName)
			require.Equal(t, []string{tc.group}, c.Subject.Organization)
			require.WithinDuration(t, before.Add(time.Hour), c.NotAfter, 2*time.Minute, "valid for the default hour")
			require.WithinDuration(t, c.NotAfter, ec.Status.ExpirationTimestamp, time.Second)

			r = s.do(http.MethodGet, "/api/v1/tenants/acme/kubeconfig", nil, tokens[tc.user]...)
			require.Equal(t, http.StatusOK, r.Code, string(r.Body))
			kc := string(r.Body)
			require.NotContains(t, kc, "client-key-data")
			require.NotContains(t, kc, "client-certificate-data")
			require.Contains(t, kc, "client.authentication.k8s.io/v1")
			require.Contains(t, kc, `command: "rezusctl"`)
			require.Contains(t, kc, `- "credential"`)
			require.Contains(t, kc, `- "acme"`)
			require.Contains(t, kc, `name: "`+tc.user+`@acme"`)

			r = s.do(http.MethodGet, "/api/v1/tenants/acme/talosconfig", nil, tokens[tc.user]...)
			require.Equal(t, http.StatusOK, r.Code, string(r.Body))
			require.Equal(t, tc.talosRole, r.Header.Get("X-Rezus-Talos-Role"))
			tc2, err := config.FromBytes(r.Body)
			require.NoError(t, err)
			crt, err := base64.StdEncoding.DecodeString(tc2.Contexts["acme"].Crt)
			require.NoError(t, err)
			tcert := verifyClientCert(t, osCA, crt)
			require.Equal(t, []string{tc.talosRole}, tcert.Subject.Organization)
			require.WithinDuration(t, before.Add(time.Hour), tcert.NotAfter, 2*time.Minute)
		})
	}

	// No role on acme: nothing, as if acme did not exist.
	for _, p := range []string{"/api/v1/tenants/acme/kubeconfig", "/api/v1/tenants/acme/talosconfig", "/api/v1/tenants/acme/kubeconfig/admin"} {
		require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, p, nil, tokens["oz"]...).Code, p)
	}
	require.Equal(t, http.StatusNotFound, s.do(http.MethodPost, "/api/v1/tenants/acme/kubernetes/credential", nil, tokens["oz"]...).Code)

	// Break-glass: the global admin only; a tenant admin binding is not enough.
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/kubeconfig/admin", nil, tokens["boss"]...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	crt, err := base64.StdEncoding.DecodeString(kubeconfigValue(t, r.Body, "client-certificate-data"))
	require.NoError(t, err)
	require.Equal(t, []string{"system:masters"}, verifyClientCert(t, kubeCA, crt).Subject.Organization)
	for _, u := range []string{"tina", "ed", "vic"} {
		r = s.do(http.MethodGet, "/api/v1/tenants/acme/kubeconfig/admin", nil, tokens[u]...)
		require.Equal(t, http.StatusForbidden, r.Code, "%s: %s", u, r.Body)
	}

	// The audit log has every issuance and every break-glass try, by whom.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		recs, _, err := s.audit.Query(context.Background(), eventstore.AuditQuery{Limit: 1000})
		require.NoError(c, err)
		issued := map[string]int{}
		glass := map[string]int{}
		for _, rec := range recs {
			switch rec.Kind {
			case handlers.CredentialKubernetes:
				if rec.Code == http.StatusCreated {
					issued[rec.Actor]++
					assert.Equal(c, rec.Actor, rec.Name, "the credential is named after its user")
				}
			case handlers.CredentialKubeconfigBreakGlass:
				glass[rec.Actor+" "+http.StatusText(rec.Code)]++
			}
		}
		assert.Equal(c, map[string]int{"vic": 1, "ed": 1, "tina": 1, "boss": 1}, issued)
		assert.Equal(c, 1, glass["boss OK"])
		assert.Equal(c, 1, glass["tina Forbidden"])
		assert.Equal(c, 1, glass["oz Not Found"])
	}, 10*time.Second, 10*time.Millisecond)
}
