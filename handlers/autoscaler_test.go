package handlers_test

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// A tenant's editor issues the autoscaler's certificate (its key in that
// answer only), lists and revokes it; a viewer lists only; someone
// without a role on the tenant does not learn it exists; every issue and
// revoke is in the audit log under AutoscalerCertificate.
func TestAutoscalerCertificates(t *testing.T) {
	ts := newTalosStack(t)
	ts.acme()
	s := ts.stack
	editor := bearer(s.createBoundUser("ed", domain.RoleNone, `[{"role":"edit","tenants":["acme"]}]`))
	viewer := bearer(s.createBoundUser("vi", domain.RoleNone, `[{"role":"view","tenants":["acme"]}]`))
	stranger := bearer(s.createBoundUser("oz", domain.RoleNone, `[]`))
	const certs = "/api/v1/tenants/acme/autoscaler/certificates"

	r := s.do(http.MethodPost, certs, `{"validity":"48h"}`, editor...)
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	var creds handlers.AutoscalerCredentials
	require.NoError(t, json.Unmarshal(r.Body, &creds))
	require.Equal(t, "acme", creds.Tenant)
	require.Equal(t, "autoscaler.example:8086", creds.Endpoint)
	require.Contains(t, creds.Key, "PRIVATE KEY")
	block, _ := pem.Decode([]byte(creds.Certificate))
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	require.Equal(t, "autoscaler:acme", cert.Subject.CommonName)
	require.InDelta(t, 48, cert.NotAfter.Sub(cert.NotBefore).Hours(), 0.1)
	require.Equal(t, "ed", creds.IssuedBy)

	for _, bad := range []string{`{"validity":"forever"}`, `{"validity":"10m"}`, `{"ttl":"1h"}`} {
		r := s.do(http.MethodPost, certs, bad, editor...)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusUnprocessableEntity}, r.Code, "%s: %s", bad, r.Body)
	}
	require.Equal(t, http.StatusForbidden, s.do(http.MethodPost, certs, `{}`, viewer...).Code)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, certs, nil, stranger...).Code)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/nope/autoscaler/certificates", nil).Code)

	r = s.do(http.MethodGet, certs, nil, viewer...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.NotContains(t, string(r.Body), "PRIVATE KEY", "a listing never holds a key")
	var list struct {
		Items []handlers.AutoscalerCertificate `json:"items"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &list))
	require.Len(t, list.Items, 1)
	require.Equal(t, creds.Serial, list.Items[0].Serial)

	require.Equal(t, http.StatusForbidden, s.do(http.MethodDelete, certs+"/"+creds.Serial, nil, viewer...).Code)
	require.Equal(t, http.StatusNoContent, s.do(http.MethodDelete, certs+"/"+creds.Serial, nil, editor...).Code)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodDelete, certs+"/"+creds.Serial, nil, editor...).Code)
	r = s.do(http.MethodGet, certs, nil, viewer...)
	require.NoError(t, json.Unmarshal(r.Body, &list))
	require.Empty(t, list.Items)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var got []string
		for _, rec := range s.auditPage(t, "?kind="+handlers.CredentialAutoscaler).Items {
			got = append(got, strings.Join([]string{rec.Method, rec.Actor, rec.Tenant, rec.Name}, " "))
		}
		assert.Contains(c, got, "POST ed acme "+creds.Serial)
		assert.Contains(c, got, "DELETE ed acme "+creds.Serial)
	}, 10*time.Second, 50*time.Millisecond)
}
