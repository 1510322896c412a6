package handlers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/talos"
)

// logEnv is the API with the real talos.LogReader, and a tenant "acme" whose
// control plane cp-1 is an emulated Talos node booted with a config rendered
// from the tenant's PKI.
type logEnv struct {
	*stack
	em *emulator.Emulator
}

func newLogEnv(t *testing.T) *logEnv {
	t.Helper()
	s := newStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	plain, err := eventstore.OpenSecrets(ctx, s.env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pki := talos.NewPKI(talos.PKIConfig{Cache: s.cache, Secrets: sealed, Log: quiet})
	s.srv.Close()
	s.api.StopWatches()
	// The emulator's nodes are on loopback, as with serve --with-emulator.
	s.api = handlers.New(handlers.Config{MetalAddresses: talos.AddressPolicy{AllowLoopback: true}}, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector,
		Identity: s.identity, MachineLogs: talos.NewLogReader(talos.LogConfig{Cache: s.cache, PKI: pki, FirstAnswer: time.Second})})
	s.srv = httptest.NewServer(s.api.Handler())

	em, err := emulator.New(emulator.Config{Addressing: emulator.AddressingLoopback,
		InstallDelay: 10 * time.Millisecond, RebootDelay: 10 * time.Millisecond, ServiceStartDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	emDone := make(chan error, 1)
	go func() { emDone <- em.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-emDone) })
	<-em.Ready()
	if !em.Loopback() {
		t.Skip("the emulator needs a loopback IP per node here (Linux)")
	}

	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	var tenant domain.Tenant
	require.NoError(t, json.Unmarshal(s.do(http.MethodGet, "/api/v1/tenants/acme", nil).Body, &tenant))
	bundle, err := pki.Bundle(ctx, "acme")
	require.NoError(t, err)
	addr, err := em.ReserveAddress(ctx, emulator.AddressSpec{Name: "cp-1"})
	require.NoError(t, err)
	ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "cp", Tenant: "acme"},
		Spec: domain.NodeGroupSpec{Role: domain.RoleControlPlane, Count: 1, Provider: "emu"}}
	cfg, err := talos.Render(talos.RenderInput{Tenant: &tenant, NodeGroup: ng, ControlPlaneAddress: addr.Address, Bundle: bundle})
	require.NoError(t, err)
	_, err = em.Create(ctx, emulator.NodeSpec{Name: "cp-1", Cluster: "acme", UserData: cfg, Address: addr.Address})
	require.NoError(t, err)
	s.mustCreate("/api/v1/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": "cp-1"},
		"spec": map[string]any{"nodeGroup": "cp", "role": "controlplane", "address": addr.Address}})
	s.mustCreate("/api/v1/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": "pending"},
		"spec": map[string]any{"nodeGroup": "cp", "role": "controlplane"}})
	require.Eventually(t, func() bool {
		for _, n := range em.List() {
			if n.Phase != emulator.PhaseRunning {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond)
	return &logEnv{stack: s, em: em}
}

// follow opens a followed log and returns its lines as they come; cancel ends it.
func (e *logEnv) follow(t *testing.T, path string) (lines <-chan string, cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	out := make(chan string, 1024)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	return out, func() { stop(); resp.Body.Close() }
}

// waitLine reads lines until one contains want.
func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the stream ended before %q", want)
			if strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no line with %q within 10s", want)
		}
	}
}

func TestMachineLogsFromEmulatedNode(t *testing.T) {
	e := newLogEnv(t)

	t.Run("service log", func(t *testing.T) {
		r := e.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp-1/logs?service=apid&tail=100", nil)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		assert.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
		assert.Contains(t, string(r.Body), "apid: starting")
		assert.Contains(t, string(r.Body), "apid: running on talos")
	})
	t.Run("dmesg", func(t *testing.T) {
		r := e.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp-1/dmesg", nil)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		assert.Contains(t, string(r.Body), "booted talos")
		assert.Contains(t, string(r.Body), "services running")
	})
	t.Run("every role reads logs", func(t *testing.T) {
		e.createUser("viewer", domain.RoleView, "password for the viewer")
		tok := e.sessionToken("viewer", "password for the viewer")
		for _, p := range []string{"/logs?service=etcd", "/dmesg"} {
			r := e.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp-1"+p, nil, bearer(tok)...)
			require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		}
	})
	t.Run("follow a service log", func(t *testing.T) {
		lines, cancel := e.follow(t, "/api/v1/tenants/acme/machines/cp-1/logs?service=kubelet&follow=true")
		waitLine(t, lines, "kubelet: starting")
		waitLine(t, lines, "kubelet: running on talos")
		cancel()
		for range lines {
		}
	})
	t.Run("follow dmesg", func(t *testing.T) {
		lines, cancel := e.follow(t, "/api/v1/tenants/acme/machines/cp-1/dmesg?follow=true")
		waitLine(t, lines, "services running")
		cancel()
		for range lines {
		}
	})

	for _, tc := range []struct {
		name, path string
		code       int
		reason     domain.Reason
		field      string
		message    string
	}{
		{name: "unknown service", path: "/machines/cp-1/logs?service=nope", code: http.StatusNotFound, reason: domain.ReasonNotFound, message: `service "nope" not found`},
		{name: "no service", path: "/machines/cp-1/logs", code: http.StatusBadRequest, reason: domain.ReasonBadRequest, field: "service"},
		{name: "bad service", path: "/machines/cp-1/logs?service=..%2Fetc", code: http.StatusBadRequest, reason: domain.ReasonBadRequest, field: "service"},
		{name: "tail zero", path: "/machines/cp-1/logs?service=apid&tail=0", code: http.StatusBadRequest, reason: domain.ReasonBadRequest, field: "tail"},
		{name: "tail too long", path: "/machines/cp-1/logs?service=apid&tail=10001", code: http.StatusBadRequest, reason: domain.ReasonBadRequest, field: "tail"},
		{name: "tail not a number", path: "/machines/cp-1/logs?service=apid&tail=x", code: http.StatusBadRequest, reason: domain.ReasonBadRequest, field: "tail"},
		{name: "follow not a bool", path: "/machines/cp-1/dmesg?follow=maybe", code: http.StatusBadRequest, reason: domain.ReasonBadRequest, field: "follow"},
		{name: "unknown machine", path: "/machines/ghost/logs?service=apid", code: http.StatusNotFound, reason: domain.ReasonNotFound},
		{name: "unknown machine dmesg", path: "/machines/ghost/dmesg", code: http.StatusNotFound, reason: domain.ReasonNotFound},
		{name: "no address yet", path: "/machines/pending/dmesg", code: http.StatusConflict, reason: domain.ReasonConflict, message: "no address yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(http.MethodGet, "/api/v1/tenants/acme"+tc.path, nil)
			require.Equal(t, tc.code, r.Code, string(r.Body))
			st := r.status(t)
			assert.Equal(t, tc.reason, st.Reason)
			if tc.field != "" {
				require.NotNil(t, st.Details, string(r.Body))
				require.NotEmpty(t, st.Details.Causes, string(r.Body))
				assert.Equal(t, tc.field, st.Details.Causes[0].Field)
			}
			assert.Contains(t, st.Message, tc.message)
		})
	}

	t.Run("unreachable node", func(t *testing.T) {
		_, err := e.em.InjectFault("cp-1", emulator.Faults{Unreachable: true})
		require.NoError(t, err)
		defer func() { _, _ = e.em.InjectFault("cp-1", emulator.Faults{}) }()
		for _, p := range []string{"/logs?service=apid", "/dmesg", "/dmesg?follow=true"} {
			r := e.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp-1"+p, nil)
			require.Equal(t, http.StatusServiceUnavailable, r.Code, string(r.Body))
			st := r.status(t)
			assert.Equal(t, domain.ReasonServiceUnavailable, st.Reason)
			assert.Contains(t, st.Message, "unreachable")
		}
	})
	t.Run("hung node", func(t *testing.T) {
		_, err := e.em.InjectFault("cp-1", emulator.Faults{Hang: true})
		require.NoError(t, err)
		defer func() { _, _ = e.em.InjectFault("cp-1", emulator.Faults{}) }()
		r := e.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp-1/logs?service=apid", nil)
		require.Equal(t, http.StatusServiceUnavailable, r.Code, string(r.Body))
		assert.Contains(t, r.status(t).Message, "no answer in time")
	})
}

func TestMachineLogsWithoutReader(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	for _, p := range []string{"/logs?service=apid", "/dmesg"} {
		r := s.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp-1"+p, nil)
		require.Equal(t, http.StatusServiceUnavailable, r.Code, string(r.Body))
		assert.Equal(t, domain.ReasonServiceUnavailable, r.status(t).Reason)
	}
}
