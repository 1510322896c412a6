package emulator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCOSIResourcesSettleOnTheLatestFacts races syncs of a cluster's nodes
// (the refresh of a change, and the syncs other nodes' changes make) against
// changes of those nodes: every node's resources, its members of the others
// included, must settle on what the nodes are now. A sync that read older
// facts and wrote after a newer one would leave them stale for good.
func TestCOSIResourcesSettleOnTheLatestFacts(t *testing.T) {
	em, _ := startEmulator(t, fastConfig(t.TempDir()))
	tc := newTestCluster(t, "stress")
	ctx := context.Background()
	names := []string{"stress-cp-1", "stress-cp-2", "stress-worker"}
	for i, name := range names {
		data := tc.controlPlane
		if i == len(names)-1 {
			data = tc.worker
		}
		_, err := em.Create(ctx, NodeSpec{Name: name, UserData: data})
		require.NoError(t, err)
	}
	var nodes []*node
	for _, name := range names {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, phaseIs(em, name, PhaseRunning)())
		}, 15*time.Second, 10*time.Millisecond, name+" running")
		n, err := em.node(name)
		require.NoError(t, err)
		// The state a node's first COSI call makes (a talosctl get).
		_, err = (&cosiServer{n: n}).state()
		require.NoError(t, err)
		nodes = append(nodes, n)
	}
	setVersion := func(n *node, v string) {
		n.mu.Lock()
		n.st.Version = v
		n.mu.Unlock()
		em.refreshCOSI(n)
	}

	// Each round changes every node while other syncs of it and of the
	// others run, then waits for the resources to hold the change: a stale
	// write stays, nothing being left to refresh it.
	for round := range 12 {
		var wg sync.WaitGroup
		for i, n := range nodes {
			// Syncs under way: one holds the node's state, the others
			// have their facts and wait for it when the change comes.
			for range 3 {
				wg.Add(2)
				go func() { defer wg.Done(); n.syncCOSI() }()
				go func() { defer wg.Done(); nodes[(i+1)%len(nodes)].syncCOSI() }()
			}
			time.Sleep(time.Millisecond)
			// Two changes at once: their refreshes race too.
			setVersion(n, fmt.Sprintf("v1.12.%d", round))
			time.Sleep(time.Millisecond)
			setVersion(n, fmt.Sprintf("v1.13.%d", round))
		}
		wg.Wait()
		for _, n := range nodes {
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				assert.NoError(ct, func() error { return cosiDiff(n) }())
			}, 15*time.Second, 10*time.Millisecond, fmt.Sprintf("round %d: %s's resources hold the latest facts", round, n.status().Name))
		}
	}
}

// cosiDiff says how n's COSI resources differ from what its facts make.
func cosiDiff(n *node) error {
	ctx := context.Background()
	f, s := n.facts()
	if s == nil {
		return errors.New("no COSI state")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[string]resource.Resource{}
	for _, r := range desiredResources(f) {
		md := r.Metadata()
		want[md.Namespace()+"/"+md.Type()+"/"+md.ID()] = r
	}
	var problems []error
	err := s.each(ctx, func(r resource.Resource) error {
		md := r.Metadata()
		key := md.Namespace() + "/" + md.Type() + "/" + md.ID()
		w, ok := want[key]
		if !ok {
			problems = append(problems, fmt.Errorf("%s: not wanted", key))
			return nil
		}
		delete(want, key)
		if same, err := sameSpec(r, w); err != nil || !same {
			problems = append(problems, fmt.Errorf("%s: stale (%v)", key, err))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for key := range want {
		problems = append(problems, fmt.Errorf("%s: missing", key))
	}
	return errors.Join(problems...)
}
