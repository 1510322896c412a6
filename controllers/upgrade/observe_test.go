package upgrade_test

import (
	"context"
	"encoding/json"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// What the saga tests observe besides the runs: the calls the nodes got, the
// events of an object, and the declared objects.

// installers returns the installer images the Upgrade calls to each node named.
func (e *sagaEnv) installers() map[string][]string {
	e.calls.mu.Lock()
	defer e.calls.mu.Unlock()
	out := map[string][]string{}
	for _, name := range e.nodes {
		if imgs := e.calls.images[e.ips[name]]; len(imgs) > 0 {
			out[name] = append([]string(nil), imgs...)
		}
	}
	return out
}

// applyCalls returns the ApplyConfiguration calls made to each node so far.
func (e *sagaEnv) applyCalls() map[string]int {
	e.calls.mu.Lock()
	defer e.calls.mu.Unlock()
	out := map[string]int{}
	for _, name := range e.nodes {
		if n := e.calls.apply[e.ips[name]]; n > 0 {
			out[name] = n
		}
	}
	return out
}

// eventTypes replays an object's events and returns their types in order.
func (e *sagaEnv) eventTypes(ref domain.Ref) []string {
	e.t.Helper()
	_, last, err := e.store.Bounds(e.ctx)
	require.NoError(e.t, err)
	cur, err := e.store.Follow(e.ctx, 1, []string{ref.Subject()})
	require.NoError(e.t, err)
	defer cur.Stop()
	var out []string
	for {
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
		rec, err := cur.Next(ctx)
		cancel()
		require.NoError(e.t, err)
		out = append(out, rec.Event.Type)
		if rec.Pending == 0 || rec.Seq >= last {
			return out
		}
	}
}

// configsApplied counts a machine's MachineConfigApplied events.
func (e *sagaEnv) configsApplied(machine string) int {
	e.t.Helper()
	n := 0
	for _, typ := range e.eventTypes(e.ref(domain.MachineKind, machine)) {
		if typ == domain.EventMachineConfigApplied {
			n++
		}
	}
	return n
}

func (e *sagaEnv) tenantObj() domain.Tenant {
	e.t.Helper()
	var t domain.Tenant
	require.NoError(e.t, json.Unmarshal(e.get(domain.TenantRef(e.tenant)), &t))
	return t
}

func (e *sagaEnv) nodeGroup(name string) domain.NodeGroup {
	e.t.Helper()
	var ng domain.NodeGroup
	require.NoError(e.t, json.Unmarshal(e.get(e.ref(domain.NodeGroupKind, name)), &ng))
	return ng
}
