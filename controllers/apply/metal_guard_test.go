package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// fakeMetal stands for the Talos API of machines in maintenance mode and
// records every call with the address it dialled.
type fakeMetal struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeMetal) record(call, address string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call+" "+address)
}

func (f *fakeMetal) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeMetal) Probe(_ context.Context, _ *secrets.Bundle, address string) (talos.NodeState, error) {
	f.record("probe", address)
	return talos.NodeState{Maintenance: true}, nil
}

func (f *fakeMetal) ApplyConfig(_ context.Context, _ *secrets.Bundle, address string, _ []byte, _ bool) (talos.ApplyResult, error) {
	f.record("apply", address)
	return talos.ApplyResult{Details: "applied"}, nil
}

func (f *fakeMetal) Bootstrap(_ context.Context, _ *secrets.Bundle, address string) error {
	f.record("bootstrap", address)
	return nil
}

func (f *fakeMetal) Reset(_ context.Context, _ *secrets.Bundle, address string) error {
	f.record("reset", address)
	return nil
}

// fakeResolver answers fixed names.
type fakeResolver map[string]string

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := r[host]
	if !ok {
		return nil, fmt.Errorf("no such host %s", host)
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// TestMetalApplyRefusesAnotherTenantsMachine: issue 42, finding 5, at apply
// time. Tenant acme's metal group lists the address of a machine beta
// registered after acme's write (the API's check raced it), a DNS name that
// resolves to it, and a name that resolves to the cloud metadata service.
// acme's run gives its config to its own machine only: it dials none of the
// others, and its log says why.
func TestMetalApplyRefusesAnotherTenantsMachine(t *testing.T) {
	metal := &fakeMetal{}
	e := newRunEnv(t, func(c *Config) {
		c.Metal = metal
		c.Resolver = fakeResolver{"stolen.lab": "10.0.0.5", "metadata.lab": "169.254.169.254", "node-4.lab": "10.0.0.4"}
	})
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.ProviderKind, "", "rack"),
		Object: &domain.Object{Spec: json.RawMessage(`{"type":"metal"}`)}})
	for _, tn := range []string{"beta", "acme"} {
		e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef(tn), Object: &domain.Object{Spec: json.RawMessage(`{}`)}})
	}
	// Beta's machine, registered straight into the store: as if after acme's write.
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.MachineKind, "beta", "spare"),
		Object: &domain.Object{Spec: json.RawMessage(`{"nodeGroup":"workers","role":"worker","address":"10.0.0.5"}`)}})
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.NodeGroupKind, "acme", "workers"),
		Object: &domain.Object{Spec: json.RawMessage(`{"role":"worker","count":4,"provider":"rack","providerConfig":{"machines":[` +
			`{"address":"node-4.lab"},{"address":"10.0.0.5"},{"address":"stolen.lab"},{"address":"metadata.lab"}]}}`)}})

	var run domain.Apply
	require.Eventually(t, func() bool {
		for _, a := range e.applies("acme") {
			if a.Status.Phase == domain.ApplyFailed || a.Status.Phase == domain.ApplySucceeded {
				run = a
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond)

	for _, c := range metal.log() {
		require.NotContains(t, c, "10.0.0.5", "beta's machine is never dialled: %v", metal.log())
		require.NotContains(t, c, "169.254.169.254", "the metadata service is never dialled: %v", metal.log())
		require.NotContains(t, c, ".lab", "a name is dialled at the address that was checked: %v", metal.log())
	}
	// acme's own machine got its config, at the address its name resolved to.
	require.Contains(t, metal.log(), "apply 10.0.0.4")
	require.Equal(t, domain.ApplyFailed, run.Status.Phase)
	var log strings.Builder
	require.NoError(t, e.worker.cfg.Logs.Follow(e.ctx, "acme", run.Metadata.Name, false, func(b []byte) error {
		log.Write(b)
		return nil
	}))
	require.Contains(t, log.String(), "machine workers-1: refusing to dial 10.0.0.5: 10.0.0.5 is registered in another tenant")
	require.Contains(t, log.String(), "machine workers-2: refusing to dial stolen.lab (10.0.0.5): 10.0.0.5 is registered in another tenant")
	require.Contains(t, log.String(), "machine workers-3: refusing to dial metadata.lab: 169.254.169.254 is a link-local address")
	require.NotContains(t, log.String(), "beta", "the other tenant is not named")
	_, ok := e.machine("acme", "workers-1")
	require.False(t, ok, "no Machine of acme records beta's machine")
}

// machine reads a Machine from the read model.
func (e *runEnv) machine(tenant, name string) (*domain.Machine, bool) {
	e.t.Helper()
	m, ok, err := projections.Get[domain.Machine](e.cache, domain.ObjectRef(domain.MachineKind, tenant, name))
	require.NoError(e.t, err)
	return m, ok
}
