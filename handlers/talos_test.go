package handlers_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/autoscaling"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/talos"
)

// talosStack is newStack serving the Talos routes, with a sealed secrets
// store, the PKI following tenants and an audit log.
type talosStack struct {
	*stack
	secrets *eventstore.SealedSecrets
	audit   *eventstore.AuditLog
}

func newTalosStack(t *testing.T) *talosStack {
	t.Helper()
	s := newStack(t).withProvider()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	audit, err := eventstore.OpenAudit(ctx, s.env.Store, eventstore.AuditConfig{})
	require.NoError(t, err)
	plain, err := eventstore.OpenSecrets(ctx, s.env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	pki := talos.NewPKI(talos.PKIConfig{Cache: s.cache, Secrets: sealed, Interval: 20 * time.Millisecond})
	svc := talos.NewService(s.cache, pki)
	s.srv.Close()
	s.api.StopWatches()
	s.api = handlers.New(handlers.Config{}, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector,
		Identity: s.identity, Audit: audit, Talos: svc, ConfigDryRun: labelsInPlace{},
		Autoscaler: handlers.NewAutoscalerCertificates(autoscaling.NewPKI(sealed, nil), "autoscaler.example:8086"), Backup: handlers.BackupFunc(func(ctx context.Context, w io.Writer) error {
			_, err := eventstore.WriteBackup(ctx, s.env.Conn, w, eventstore.BackupConfig{Mode: "online"})
			return err
		})})
	s.srv = httptest.NewServer(s.api.Handler())
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pki.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
	return &talosStack{stack: s, secrets: sealed, audit: audit}
}

// acme creates a tenant with a control-plane and a worker group and one machine in each.
func (s *talosStack) acme() {
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.mustCreate("/api/v1/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "cp"},
		"spec": map[string]any{"role": "controlplane", "count": 1, "provider": "emu"}})
	s.mustCreate("/api/v1/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "workers"},
		"spec": map[string]any{"role": "worker", "count": 1, "provider": "emu", "labels": map[string]any{"tier": "web"}}})
	s.mustCreate("/api/v1/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": "cp1"},
		"spec": map[string]any{"nodeGroup": "cp", "role": "controlplane", "address": "10.0.0.10"}})
	s.mustCreate("/api/v1/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": "w1"},
		"spec": map[string]any{"nodeGroup": "workers", "role": "worker", "address": "10.0.0.21"}})
}

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(pemBytes)
	require.NotNil(t, blk, "no PEM block")
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	return c
}

// verifyClientCert checks that certPEM is a client certificate signed by caPEM.
func verifyClientCert(t *testing.T, caPEM, certPEM []byte) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	c := parseCert(t, certPEM)
	_, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	return c
}

func kubeconfigValue(t *testing.T, kc []byte, field string) string {
	t.Helper()
	for _, line := range strings.Split(string(kc), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+": "); ok {
			return v
		}
	}
	t.Fatalf("no %s in kubeconfig:\n%s", field, kc)
	return ""
}

func TestTalosConfigsAndCredentials(t *testing.T) {
	s := newTalosStack(t)
	s.acme()

	// The PKI follows tenant creation.
	require.Eventually(t, func() bool {
		_, err := s.secrets.Get(context.Background(), talos.PKIKey("acme"))
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)

	r := s.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp1/config", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Contains(t, r.Header.Get("Content-Type"), "text/yaml")
	cp, err := configloader.NewFromBytes(r.Body)
	require.NoError(t, err)
	require.Equal(t, "https://10.0.0.10:6443", cp.Cluster().Endpoint().String())
	require.Equal(t, "controlplane", cp.Machine().Type().String())

	// The break-glass kubeconfig: a system:masters client cert signed by the Kubernetes CA the control plane runs with.
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/kubeconfig/admin", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Equal(t, `"https://10.0.0.10:6443"`, kubeconfigValue(t, r.Body, "server"))
	crt, err := base64.StdEncoding.DecodeString(kubeconfigValue(t, r.Body, "client-certificate-data"))
	require.NoError(t, err)
	c := verifyClientCert(t, cp.Cluster().IssuingCA().Crt, crt)
	require.Equal(t, []string{"system:masters"}, c.Subject.Organization)
	ca, err := base64.StdEncoding.DecodeString(kubeconfigValue(t, r.Body, "certificate-authority-data"))
	require.NoError(t, err)
	require.Equal(t, string(cp.Cluster().IssuingCA().Crt), string(ca))

	// talosconfig: an os:admin client cert signed by the OS CA of the machines, endpoints = control planes.
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/talosconfig", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	tc, err := clientconfig.FromBytes(r.Body)
	require.NoError(t, err)
	ctx := tc.Contexts["acme"]
	require.NotNil(t, ctx)
	require.Equal(t, []string{"10.0.0.10"}, ctx.Endpoints)
	tcrt, err := base64.StdEncoding.DecodeString(ctx.Crt)
	require.NoError(t, err)
	c = verifyClientCert(t, cp.Machine().Security().IssuingCA().Crt, tcrt)
	require.Equal(t, []string{"os:admin"}, c.Subject.Organization)

	// Worker config and the group's template, from the same PKI.
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/machines/w1/config", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	w, err := configloader.NewFromBytes(r.Body)
	require.NoError(t, err)
	require.Equal(t, "web", w.Machine().NodeLabels()["tier"])
	require.Equal(t, string(cp.Machine().Security().IssuingCA().Crt), string(w.Machine().Security().IssuingCA().Crt))
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers/config", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	for _, p := range []string{"/api/v1/tenants/acme/machines/nope/config", "/api/v1/tenants/acme/nodegroups/nope/config", "/api/v1/tenants/nope/kubeconfig"} {
		require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, p, nil).Code, p)
	}

	// Every download is in the audit log, the refused one (no such tenant) too.
	var kinds []string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		recs, _, err := s.audit.Query(context.Background(), eventstore.AuditQuery{Limit: 1000})
		require.NoError(c, err)
		kinds = nil
		for _, rec := range recs {
			if rec.Kind == handlers.CredentialKubeconfig || rec.Kind == handlers.CredentialTalosconfig || rec.Kind == handlers.CredentialKubeconfigBreakGlass {
				kinds = append(kinds, rec.Kind)
			}
		}
		assert.Len(c, kinds, 3)
	}, 10*time.Second, 5*time.Millisecond)
	require.ElementsMatch(t, []string{handlers.CredentialKubeconfigBreakGlass, handlers.CredentialTalosconfig, handlers.CredentialKubeconfig}, kinds)

	// Rendered configs hold the tenant's keys: their downloads are audited too.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		recs, _, err := s.audit.Query(context.Background(), eventstore.AuditQuery{Limit: 1000})
		require.NoError(c, err)
		n := 0
		for _, rec := range recs {
			if rec.Kind == handlers.CredentialMachineConfig && rec.Tenant == "acme" {
				n++
			}
		}
		assert.GreaterOrEqual(c, n, 4, "cp and w1 configs, the workers template, and the refused ones")
	}, 10*time.Second, 5*time.Millisecond)
}

func TestConfigPatchesAtTheAPI(t *testing.T) {
	s := newTalosStack(t)
	s.acme()

	for _, tc := range []struct {
		name, format, patch, want string
	}{
		{"unknown-field", "strategic", "machine:\n  notAField: true\n", "notAField"},
		{"bad-json6902", "json6902", `[{"op":"replace","path":"/machine/nope/x","value":1}]`, "missing"},
		{"wrong-format", "json6902", "machine:\n  env:\n    A: b\n", "strategic merge patch"},
		{"invalid-result", "strategic", "machine:\n  type: banana\n", "banana"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.lastSeq()
			r := s.do(http.MethodPost, "/api/v1/tenants/acme/configpatches", map[string]any{"metadata": map[string]any{"name": tc.name},
				"spec": map[string]any{"format": tc.format, "patch": tc.patch}})
			require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, domain.ReasonInvalid, domain.Reason(st.Reason))
			require.Len(t, st.Details.Causes, 1)
			require.Equal(t, "spec.patch", st.Details.Causes[0].Field)
			require.Contains(t, st.Details.Causes[0].Message, tc.want)
			require.Equal(t, before, s.lastSeq(), "nothing is stored")
			require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/acme/configpatches/"+tc.name, nil).Code)
		})
	}

	// A good patch, stored disabled, and the diff it would make.
	p := s.mustCreate("/api/v1/tenants/acme/configpatches", map[string]any{"metadata": map[string]any{"name": "sysctl"},
		"spec": map[string]any{"format": "json6902", "enabled": false, "target": map[string]any{"kind": "role", "name": "worker"},
			"patch": `[{"op":"add","path":"/machine/sysctls","value":{"vm.max_map_count":"262144"}}]`}})
	r := s.do(http.MethodGet, "/api/v1/tenants/acme/machines/w1/config", nil)
	require.Equal(t, http.StatusOK, r.Code)
	require.NotContains(t, string(r.Body), "vm.max_map_count", "a disabled patch is not applied")
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/machines/w1/config?diff=sysctl", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Contains(t, r.Header.Get("Content-Type"), "text/x-diff")
	require.Contains(t, string(r.Body), "+++ with configpatch/sysctl")
	require.Contains(t, string(r.Body), "+        vm.max_map_count: \"262144\"")
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/cp/config?diff=sysctl", nil)
	require.Equal(t, http.StatusOK, r.Code)
	require.Empty(t, r.Body, "the patch targets workers only")
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/acme/machines/w1/config?diff=nope", nil).Code)

	// Enabling it applies it; breaking it through PATCH is refused and stores nothing.
	r = s.do(http.MethodPatch, "/api/v1/tenants/acme/configpatches/sysctl", `{"spec":{"enabled":true}}`)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/machines/w1/config", nil)
	require.Contains(t, string(r.Body), "vm.max_map_count")
	before := s.lastSeq()
	r = s.do(http.MethodPatch, "/api/v1/tenants/acme/configpatches/sysctl", `{"spec":{"format":"strategic"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	require.Equal(t, "spec.patch", r.status(t).Details.Causes[0].Field)
	require.Equal(t, before, s.lastSeq())

	// PUT goes through the same check.
	var obj map[string]any
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/configpatches/sysctl", nil)
	require.NoError(t, json.Unmarshal(r.Body, &obj))
	obj["spec"].(map[string]any)["patch"] = "machine:\n  notAField: 1\n"
	obj["spec"].(map[string]any)["format"] = "strategic"
	r = s.do(http.MethodPut, "/api/v1/tenants/acme/configpatches/sysctl", obj)
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	_ = p
}

func TestTalosRoutesNeedEditRole(t *testing.T) {
	s := newTalosStack(t)
	s.acme()
	s.createUser("viewer", domain.RoleView, "password for the viewer")
	s.createUser("editor", domain.RoleEdit, "password for the editor")
	view := s.sessionToken("viewer", "password for the viewer")
	edit := s.sessionToken("editor", "password for the editor")
	for _, p := range []string{
		"/api/v1/tenants/acme/machines/cp1/config",
		"/api/v1/tenants/acme/nodegroups/cp/config",
	} {
		require.Equal(t, http.StatusForbidden, s.do(http.MethodGet, p, nil, bearer(view)...).Code, p)
		require.Equal(t, http.StatusOK, s.do(http.MethodGet, p, nil, bearer(edit)...).Code, p)
	}
	// A viewer still reads the objects themselves.
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp1", nil, bearer(view)...).Code)
}

func TestTenantPKILifecycle(t *testing.T) {
	s := newTalosStack(t)
	ctx := context.Background()
	s.mustCreate("/api/v1/tenants", tenantBody("race", nil))
	// Replicas racing to create a tenant's bundle agree on one: two more PKIs
	// on the same bucket race the running one.
	crts := make(chan string, 2)
	for range 2 {
		go func() {
			p := talos.NewPKI(talos.PKIConfig{Cache: s.cache, Secrets: s.secrets})
			b, err := p.Bundle(ctx, "race")
			if err != nil {
				crts <- err.Error()
				return
			}
			crts <- string(b.Certs.OS.Crt)
		}()
	}
	a, b := <-crts, <-crts
	require.Equal(t, a, b)
	raw, err := s.secrets.Get(ctx, talos.PKIKey("race"))
	require.NoError(t, err)
	stored, err := talos.DecodeBundle(raw)
	require.NoError(t, err)
	require.Equal(t, a, string(stored.Certs.OS.Crt))

	s.acme()
	require.Eventually(t, func() bool {
		_, err := s.secrets.Get(ctx, talos.PKIKey("acme"))
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)
	// One PKI: two downloads are signed by the same CA.
	var cas []string
	for range 2 {
		r := s.do(http.MethodGet, "/api/v1/tenants/acme/kubeconfig", nil)
		require.Equal(t, http.StatusOK, r.Code)
		cas = append(cas, kubeconfigValue(t, r.Body, "certificate-authority-data"))
	}
	require.Equal(t, cas[0], cas[1])
	raw, err = s.secrets.Get(ctx, talos.PKIKey("acme"))
	require.NoError(t, err)
	bundle, err := talos.DecodeBundle(raw)
	require.NoError(t, err)
	require.NotNil(t, bundle.Certs.OS)

	// The raw bucket holds no PEM, in clear or base64.
	js, err := jetstream.New(s.env.Conn)
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, eventstore.SecretsBucket)
	require.NoError(t, err)
	keys, err := kv.Keys(ctx)
	require.NoError(t, err)
	require.Contains(t, keys, talos.PKIKey("acme"))
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		require.NoError(t, err)
		v := string(e.Value())
		require.NotContains(t, v, "-----BEGIN", k)
		require.NotContains(t, v, base64.StdEncoding.EncodeToString([]byte("-----BEGIN"))[:12], k)
		require.NotContains(t, v, "BootstrapToken", k)
	}
	// Nor does any event.
	all := s.allStoredBytes()
	require.NotContains(t, all, "-----BEGIN")
	require.NotContains(t, all, base64.StdEncoding.EncodeToString([]byte("-----BEGIN"))[:12])

	// Deleting the tenant removes its PKI once the tenant is gone.
	r := s.do(http.MethodDelete, "/api/v1/tenants/acme", nil)
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, r.Code, string(r.Body))
	require.Eventually(t, func() bool {
		_, err := s.secrets.Get(ctx, talos.PKIKey("acme"))
		return err != nil
	}, 15*time.Second, 5*time.Millisecond)
	_, ok := s.cache.Get(domain.Ref{Kind: domain.TenantKind.Kind, Name: "acme"})
	require.False(t, ok, "the PKI outlives the tenant object")
}
