package webui

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// fakeMachineLogs answers a few fixed lines per log (one of them markup, to
// see it escaped) and records what it was asked; a followed log stays open
// until the call ends.
type fakeMachineLogs struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeMachineLogs) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeMachineLogs) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeMachineLogs) open(ctx context.Context, text string, follow bool) io.ReadCloser {
	if !follow {
		return io.NopCloser(strings.NewReader(text))
	}
	pr, pw := io.Pipe()
	go func() {
		if _, err := io.WriteString(pw, text); err == nil {
			<-ctx.Done()
		}
		pw.Close()
	}()
	return pr
}

func (f *fakeMachineLogs) Logs(ctx context.Context, tenant, machine, service string, follow bool, tail int32) (io.ReadCloser, error) {
	f.record(fmt.Sprintf("logs %s/%s %s follow=%t tail=%d", tenant, machine, service, follow, tail))
	switch service {
	case "etcd":
		return nil, &domain.Error{Reason: domain.ReasonNotFound, Message: `machine "m1" has no etcd log: service "etcd" not found`}
	case "udevd":
		// The node ends the follow at once (it went away, or rebooted).
		return io.NopCloser(strings.NewReader("udevd: stopping\n")), nil
	}
	return f.open(ctx, service+": starting\n"+service+": <script>alert(1)</script>\n", follow), nil
}

func (f *fakeMachineLogs) Dmesg(ctx context.Context, tenant, machine string, follow bool) (io.ReadCloser, error) {
	f.record(fmt.Sprintf("dmesg %s/%s follow=%t", tenant, machine, follow))
	return f.open(ctx, "kernel: booted talos\n", follow), nil
}

func withMachineLogs(r handlers.MachineLogReader) stackOption {
	return func(d *handlers.Deps) { d.MachineLogs = r }
}

// acmeMachine makes tenant acme with node group cp and machine m1 in it.
func (s *uiStack) acmeMachine() {
	s.t.Helper()
	s.createProvider("emu")
	s.create("/tenants", map[string]any{"apiVersion": domain.APIVersion, "kind": "Tenant",
		"metadata": map[string]any{"name": "acme"}, "spec": map[string]any{}})
	s.create("/tenants/acme/nodegroups", map[string]any{"apiVersion": domain.APIVersion, "kind": "NodeGroup",
		"metadata": map[string]any{"name": "cp"}, "spec": map[string]any{"role": "controlplane", "count": 1, "provider": "emu"}})
	s.create("/tenants/acme/machines", map[string]any{"apiVersion": domain.APIVersion, "kind": "Machine",
		"metadata": map[string]any{"name": "m1", "labels": map[string]any{"zone": "a"}},
		"spec": map[string]any{"nodeGroup": "cp", "role": "controlplane", "address": "10.0.0.10",
			"providerID": "emu://acme/m1", "shape": "small", "hostname": "m1.acme"}})
}

func TestMachinePage(t *testing.T) {
	s := newUIStack(t, withMachineLogs(&fakeMachineLogs{}))
	s.acmeMachine()
	viewer := s.signIn("vera", domain.RoleView)
	editor := s.signIn("eddie", domain.RoleEdit)

	p := viewer.get("/ui/tenants/acme/machines/m1")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	for _, want := range []string{"Machine m1", `data-testid="machine-nodegroup">cp<`, "10.0.0.10", "emu://acme/m1", "small", "m1.acme", "zone=a",
		`data-phase="Unknown"`, `sse-connect="/ui/live/tenants/acme/machines/m1"`, `sse-swap="machine"`,
		`sse-connect="/ui/live/tenants/acme/machines/m1/logs?service=machined"`, `sse-swap="log"`, `hx-swap="beforeend"`, "kernel (dmesg)"} {
		assert.Contains(t, p.Body, want)
	}
	assert.NotContains(t, p.Body, "machine-config", "a viewer is not offered the config: it holds the tenant's keys")
	assert.NotContains(t, p.Body, "data-mutating", "nothing on the page changes anything")
	assert.Equal(t, 2, strings.Count(p.Body, "sse-connect="), "the live details and the log: two streams")

	cfg := viewer.hxGet("/ui/tenants/acme/machines/m1/config")
	assert.Equal(t, http.StatusForbidden, cfg.Code, cfg.Body)
	assert.Contains(t, cfg.Body, `data-testid="flash-error"`)

	p = editor.get("/ui/tenants/acme/machines/m1")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	assert.Contains(t, p.Body, `data-testid="machine-config"`)
	assert.Contains(t, p.Body, `hx-get="/ui/tenants/acme/machines/m1/config"`)
	cfg = editor.hxGet("/ui/tenants/acme/machines/m1/config")
	require.Equal(t, http.StatusOK, cfg.Code, cfg.Body)
	assert.Contains(t, cfg.Body, `data-testid="machine-config-yaml"`)
	assert.Contains(t, cfg.Body, "machine:")

	p = viewer.get("/ui/tenants/acme/machines/m1?service=kubelet")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	assert.Contains(t, p.Body, `logs?service=kubelet"`)

	// Choosing another source swaps in a panel with its own stream.
	panel := viewer.hxGet("/ui/tenants/acme/machines/m1/logs?service=kernel")
	require.Equal(t, http.StatusOK, panel.Code, panel.Body)
	assert.Contains(t, panel.Body, `sse-connect="/ui/live/tenants/acme/machines/m1/logs?service=kernel"`)
	assert.Contains(t, panel.Body, `<option value="kernel" selected>`)
	assert.NotContains(t, panel.Body, "<html")

	for _, path := range []string{"/ui/tenants/acme/machines/ghost", "/ui/tenants/nope/machines/m1"} {
		p = viewer.get(path)
		assert.Equal(t, http.StatusNotFound, p.Code, path)
		assert.Contains(t, p.Body, `data-testid="error-message"`)
	}
	p = viewer.hxGet("/ui/tenants/acme/machines/ghost/logs?service=apid")
	assert.Equal(t, http.StatusNotFound, p.Code)
}

func TestMachineLogStream(t *testing.T) {
	f := &fakeMachineLogs{}
	s := newUIStack(t, withMachineLogs(f))
	s.acmeMachine()
	viewer := s.signIn("vera", domain.RoleView)

	var got string
	ok := viewer.liveEvents("/ui/live/tenants/acme/machines/m1/logs?service=apid", 10*time.Second, func(event, data string) bool {
		if event == "log" {
			got += data
		}
		return strings.Contains(got, "alert(1)")
	})
	require.True(t, ok, got)
	assert.Contains(t, got, "apid: starting\n")
	assert.Contains(t, got, "apid: &lt;script&gt;alert(1)&lt;/script&gt;\n")
	assert.NotContains(t, got, "<script>")

	got = ""
	ok = viewer.liveEvents("/ui/live/tenants/acme/machines/m1/logs?service=kernel", 10*time.Second, func(event, data string) bool {
		got += data
		return event == "log" && strings.Contains(data, "kernel: booted talos")
	})
	require.True(t, ok, got)

	// A log the node does not have says so, and the stream ends.
	ok = viewer.liveEvents("/ui/live/tenants/acme/machines/m1/logs?service=etcd", 10*time.Second, func(event, data string) bool {
		return event == liveEndEvent && strings.Contains(data, "Cannot read the log") && strings.Contains(data, "no etcd log")
	})
	require.True(t, ok)

	// An unknown source falls back to machined.
	ok = viewer.liveEvents("/ui/live/tenants/acme/machines/m1/logs?service=..%2F..%2Fetc", 10*time.Second, func(event, data string) bool {
		return event == "log" && strings.Contains(data, "machined: starting")
	})
	require.True(t, ok)

	assert.Contains(t, f.log(), "logs acme/m1 apid follow=true tail=500")
	assert.Contains(t, f.log(), "dmesg acme/m1 follow=true")
}

func TestMachineLogStreamWithoutReader(t *testing.T) {
	s := newUIStack(t)
	s.acmeMachine()
	viewer := s.signIn("vera", domain.RoleView)
	ok := viewer.liveEvents("/ui/live/tenants/acme/machines/m1/logs?service=apid", 10*time.Second, func(event, data string) bool {
		return event == liveEndEvent && strings.Contains(data, "reading machine logs is not enabled on this server")
	})
	require.True(t, ok)
}

func TestMachineLiveDetails(t *testing.T) {
	s := newUIStack(t, withMachineLogs(&fakeMachineLogs{}))
	s.acmeMachine()
	viewer := s.signIn("vera", domain.RoleView)
	var once sync.Once
	ok := viewer.liveEvents("/ui/live/tenants/acme/machines/m1", 15*time.Second, func(event, data string) bool {
		if event != "machine" {
			return false
		}
		// The first render is the state at connect; change it then.
		once.Do(func() {
			assert.Contains(t, data, `data-phase="Unknown"`)
			s.apiCall(http.MethodPatch, "/tenants/acme/machines/m1/status", map[string]any{"status": map[string]any{
				"stage": "Running", "ready": true, "configUpToDate": true, "talosVersion": "v1.9.5",
				"conditions": []map[string]any{{"type": "Healthy", "status": "True", "reason": "AllServicesHealthy",
					"message": "every <service> is healthy", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}}}, nil)
		})
		return strings.Contains(data, "v1.9.5")
	})
	require.True(t, ok)

	p := viewer.get("/ui/tenants/acme/machines/m1")
	require.Equal(t, http.StatusOK, p.Code)
	assert.Contains(t, p.Body, `data-phase="Running"`)
	assert.Contains(t, p.Body, `data-condition="Healthy"`)
	assert.Contains(t, p.Body, "every &lt;service&gt; is healthy")
}

// TestMachinePageShowsItsSchematic: the schematic and extensions a machine's
// Talos API reported (its status) are on its page.
func TestMachinePageShowsItsSchematic(t *testing.T) {
	s := newUIStack(t, withMachineLogs(&fakeMachineLogs{}))
	s.acmeMachine()
	iscsi := domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}
	s.record(domain.MachineKind, "acme", "m2", domain.MachineSpec{NodeGroup: "cp", Role: domain.RoleControlPlane, Address: "10.0.0.11"},
		domain.MachineStatus{Stage: "Running", TalosVersion: "v1.13.0", Schematic: iscsi.ID(), Extensions: []string{"iscsi-tools"}})
	viewer := s.signIn("vera", domain.RoleView)
	p := viewer.get("/ui/tenants/acme/machines/m2")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	assert.Contains(t, p.Body, `title="`+iscsi.ID()+`" data-testid="machine-schematic"`)
	assert.Contains(t, p.Body, `data-testid="machine-extensions">iscsi-tools<`)
	p = viewer.get("/ui/tenants/acme/machines/m1")
	assert.Contains(t, p.Body, "not a factory image", "a machine that reports no schematic")
}

// A machine the config controller waits for after a config reboot says
// what it waits for, since when and until when.
func TestMachinePageShowsItsConfigWait(t *testing.T) {
	s := newUIStack(t, withMachineLogs(&fakeMachineLogs{}))
	s.acmeMachine()
	w := domain.BeginWait(nil, "m2 to be back after its config reboot", time.Now().Add(-4*time.Minute), 10*time.Minute)
	w.Observe("connection refused", time.Now())
	s.record(domain.MachineKind, "acme", "m2", domain.MachineSpec{NodeGroup: "cp", Role: domain.RoleControlPlane, Address: "10.0.0.11"},
		domain.MachineStatus{Stage: "Rebooting", ConfigWait: &w})
	p := s.signIn("vera", domain.RoleView).get("/ui/tenants/acme/machines/m2")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	assert.Contains(t, p.Body, `data-testid="config-wait">waiting for m2 to be back after its config reboot: connection refused, 4m`)
	assert.Contains(t, p.Body, "(fails in ")
}
