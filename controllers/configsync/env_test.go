package configsync_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/configsync"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// env is a tenant "acme" of emulated nodes (talostest: cp-1.., w-1..) with
// its node groups "cp" and "workers", and config controllers started on it
// whose Talos API calls go through the real NodeAPI and are recorded.
type env struct {
	*talostest.Cluster
	calls *recordedNodes
	logs  *logLines
}

func newEnv(t testing.TB, cps, workers, workerParallelism int) *env {
	t.Helper()
	c := talostest.Start(t, cps, workers)
	e := &env{Cluster: c, calls: &recordedNodes{api: talos.NodeAPI{Timeout: 5 * time.Second}, names: map[string]string{}}, logs: &logLines{}}
	e.Execute(domain.Command{Op: domain.OpCreate, Ref: e.ref(domain.NodeGroupKind, "cp"), Object: &domain.Object{
		Metadata: domain.ObjectMeta{Name: "cp", Tenant: e.Tenant}, Spec: json.RawMessage(fmt.Sprintf(`{"role":"controlplane","count":%d,"provider":"emu"}`, cps))}})
	e.Execute(domain.Command{Op: domain.OpCreate, Ref: e.ref(domain.NodeGroupKind, "workers"), Object: &domain.Object{
		Metadata: domain.ObjectMeta{Name: "workers", Tenant: e.Tenant},
		Spec:     json.RawMessage(fmt.Sprintf(`{"role":"worker","count":%d,"provider":"emu","updateStrategy":{"maxParallelism":%d}}`, workers, workerParallelism))}})
	for _, m := range e.machines() {
		e.calls.names[m.Spec.Address] = m.Metadata.Name
	}
	return e
}

func (e *env) ref(kind *domain.KindInfo, name string) domain.Ref {
	return domain.ObjectRef(kind, e.Tenant, name)
}

// start runs a config controller until the end of the test.
func (e *env) start(mutate func(*configsync.Config)) *configsync.Controller {
	e.T.Helper()
	c, _ := e.startStoppable(mutate)
	return c
}

// startStoppable runs a config controller until stop (or the end of the
// test), as a replica that a restart takes down.
func (e *env) startStoppable(mutate func(*configsync.Config)) (c *configsync.Controller, stop func()) {
	e.T.Helper()
	cfg := configsync.Config{Store: e.Store, Cache: e.Cache, Talos: talos.NewService(e.Cache, e.PKI), Holder: "test",
		Nodes: e.calls, Log: slog.New(e.logs), CallTimeout: 5 * time.Second, Debounce: 10 * time.Millisecond,
		BackoffBase: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, PollInterval: 5 * time.Millisecond,
		RebootDownWait: time.Second, RebootTimeout: 20 * time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	require.NoError(e.T, cfg.Validate())
	c = configsync.New(cfg)
	stop = controllertest.Start(e.T, e.Ctx, c.Run)
	require.Eventually(e.T, c.Leading, 30*time.Second, 5*time.Millisecond, "controller leading")
	return c, stop
}

func (e *env) machines() []domain.Machine {
	e.T.Helper()
	require.NoError(e.T, e.Cache.Sync(e.Ctx))
	ms, err := projections.List[domain.Machine](e.Cache, domain.MachineKind, projections.ListOptions{Tenant: e.Tenant})
	require.NoError(e.T, err)
	return ms
}

// nodeHashes are the hashes of the configs the emulated nodes hold, by name.
func (e *env) nodeHashes() map[string]string {
	out := map[string]string{}
	for _, n := range e.Em.List() {
		out[n.Name] = n.ConfigHash
	}
	return out
}

// converged says what keeps every machine from holding its config as the
// emulator reports it, with the books agreeing ("" when none).
func (e *env) converged() string {
	nodes := e.nodeHashes()
	for _, m := range e.machines() {
		held := m.Metadata.Annotations[domain.AnnotationConfigHash]
		c := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied)
		switch {
		case held == "" || nodes[m.Metadata.Name] != held:
			return fmt.Sprintf("%s: node holds %.8s, annotation %.8s", m.Metadata.Name, nodes[m.Metadata.Name], held)
		case !m.Status.ConfigUpToDate || c == nil || c.Status != "True":
			return fmt.Sprintf("%s: status %+v", m.Metadata.Name, c)
		}
	}
	return ""
}

func (e *env) waitConverged(what string) {
	e.T.Helper()
	require.EventuallyWithT(e.T, func(c *assert.CollectT) { assert.Empty(c, e.converged(), what) }, 60*time.Second, 5*time.Millisecond, what)
}

// patch creates or replaces a ConfigPatch targeting every machine.
func (e *env) patch(name, text string, enabled bool) {
	e.T.Helper()
	spec, err := json.Marshal(map[string]any{"patch": text, "enabled": enabled})
	require.NoError(e.T, err)
	ref := e.ref(domain.ConfigPatchKind, name)
	op := domain.OpCreate
	obj := &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: e.Tenant}}
	if raw, ok := e.Cache.Get(ref); ok {
		require.NoError(e.T, json.Unmarshal(raw, obj))
		op = domain.OpUpdate
	}
	obj.Spec = spec
	e.Execute(domain.Command{Op: op, Ref: ref, Object: obj})
}

// updateGroup changes a node group's spec through f.
func (e *env) updateGroup(name string, f func(*domain.NodeGroupSpec)) {
	e.T.Helper()
	ref := e.ref(domain.NodeGroupKind, name)
	ng := talostest.GetAs[domain.NodeGroup](e.T, e.Cache, ref)
	f(&ng.Spec)
	spec, err := json.Marshal(ng.Spec)
	require.NoError(e.T, err)
	var obj domain.Object
	raw, _ := e.Cache.Get(ref)
	require.NoError(e.T, json.Unmarshal(raw, &obj))
	obj.Spec = spec
	e.Execute(domain.Command{Op: domain.OpUpdate, Ref: ref, Object: &obj})
}

// recordedNodes is the real NodeAPI, recording the order of the applies it
// makes ("+name" when one starts, "-name" when it ends). A machine told to
// stay down (stayDown) answers Ready with an error from its next apply on,
// as a node that does not come back from its reboot.
type recordedNodes struct {
	api   talos.NodeAPI
	names map[string]string // by address

	mu  sync.Mutex
	log []string
	// staysDown: machine -> the error its Ready answers after an apply;
	// down: the machines that took one since.
	staysDown map[string]string
	down      map[string]bool
}

func (r *recordedNodes) ApplyConfig(ctx context.Context, b *secrets.Bundle, address string, cfg []byte, maintenance bool) (talos.ApplyResult, error) {
	r.note("+" + r.names[address])
	defer r.note("-" + r.names[address])
	res, err := r.api.ApplyConfig(ctx, b, address, cfg, maintenance)
	r.mu.Lock()
	if _, ok := r.staysDown[r.names[address]]; ok && err == nil {
		r.down[r.names[address]] = true
	}
	r.mu.Unlock()
	return res, err
}

// stayDown makes machine answer Ready with answer once it took a config;
// "" brings it back.
func (r *recordedNodes) stayDown(machine, answer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.staysDown == nil {
		r.staysDown, r.down = map[string]string{}, map[string]bool{}
	}
	if answer == "" {
		delete(r.staysDown, machine)
		delete(r.down, machine)
		return
	}
	r.staysDown[machine] = answer
}

func (r *recordedNodes) ApplyConfigDryRun(ctx context.Context, b *secrets.Bundle, address string, cfg []byte) (talos.ApplyResult, error) {
	return r.api.ApplyConfigDryRun(ctx, b, address, cfg)
}

func (r *recordedNodes) Ready(ctx context.Context, b *secrets.Bundle, address string) (string, error) {
	r.mu.Lock()
	answer, down := r.staysDown[r.names[address]], r.down[r.names[address]]
	r.mu.Unlock()
	if down {
		return "", errors.New(answer)
	}
	return r.api.Ready(ctx, b, address)
}

func (r *recordedNodes) note(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

// take returns the applies recorded so far and forgets them.
func (r *recordedNodes) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.log
	r.log = nil
	return out
}

// applied are the machines given a config in a log, in order of start.
func applied(log []string) []string {
	var out []string
	for _, s := range log {
		if strings.HasPrefix(s, "+") {
			out = append(out, s[1:])
		}
	}
	return out
}

// maxInFlight is the most applies running at once among machines with prefix.
func maxInFlight(log []string, prefix string) int {
	n, most := 0, 0
	for _, s := range log {
		if !strings.HasPrefix(s[1:], prefix) {
			continue
		}
		if s[0] == '+' {
			n++
		} else {
			n--
		}
		most = max(most, n)
	}
	return most
}

// logLines is a slog handler keeping the messages, to wait for one.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func (l *logLines) has(substr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			return true
		}
	}
	return false
}
