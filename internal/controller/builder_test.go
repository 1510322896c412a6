package controller_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/controller"
)

// syncer records that the read model was caught up, and in which order
// against the controller's own Lead and the listing of pending keys.
type syncer struct {
	mu    sync.Mutex
	order *[]string
	err   error
}

func (s *syncer) Sync(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.order = append(*s.order, "sync")
	return s.err
}

// leadingFake is a fake with a Lead of its own.
type leadingFake struct {
	*fake
	order   *[]string
	stopped chan struct{}
}

func (l leadingFake) Lead(context.Context, *controller.Queue) (func(), error) {
	*l.order = append(*l.order, "lead")
	return func() { close(l.stopped) }, nil
}

func (h *harness) spec(order *[]string, pending ...string) controller.Spec {
	return controller.Spec{
		Store: h.env.Store, Holder: h.cfg.Holder, Name: "test controller",
		Lease: h.cfg.Lease, Consumer: "built", Queue: h.cfg.Queue, Description: "keys of the test",
		Kinds: h.cfg.Kinds, Clock: h.clock,
		ReadModel: &syncer{order: order},
		Pending: func(context.Context) ([]string, error) {
			*order = append(*order, "pending")
			return pending, nil
		},
	}
}

// TestBuildLeadsFromThePendingList: a controller built with a Spec gets,
// on taking the lease, the read model caught up, then its own Lead, then
// every pending key queued and run; when the lease ends its Lead's stop
// runs.
func TestBuildLeadsFromThePendingList(t *testing.T) {
	h := newHarness(t)
	var order []string
	f := newFake()
	l := leadingFake{fake: f, order: &order, stopped: make(chan struct{})}
	b := controller.Build(h.spec(&order, "alpha", "beta"), l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()

	got := map[string]bool{}
	for range 2 {
		s := recv(t, f.started, "a pending key's run")
		got[s.key] = true
		require.Equal(t, []string{"lead"}, s.entry.Sources, "queued by the lead")
	}
	require.Equal(t, map[string]bool{"alpha": true, "beta": true}, got)
	require.Equal(t, []string{"sync", "lead", "pending"}, order)
	require.True(t, b.Leading())

	cancel()
	require.NoError(t, recv(t, done, "Run to end"))
	recv(t, l.stopped, "the Lead's stop")
	require.False(t, b.Leading())
}

// TestBuildFailsTheLeadWhenTheReadModelCannotSync: nothing is queued from
// a read model that is not caught up.
func TestBuildFailsTheLeadWhenTheReadModelCannotSync(t *testing.T) {
	h := newHarness(t)
	var order []string
	f := newFake()
	spec := h.spec(&order, "alpha")
	spec.ReadModel = &syncer{order: &order, err: errors.New("behind")}
	b := controller.Build(spec, f)
	err := b.Run(context.Background())
	require.ErrorContains(t, err, "behind")
	require.Equal(t, []string{"sync"}, order, "no key listed")
	require.False(t, h.queued(t, "alpha"))
}

// TestBuildResyncsThePendingList: without a Resync of its own, the
// controller's pending keys are queued again at each resync.
func TestBuildResyncsThePendingList(t *testing.T) {
	h := newHarness(t)
	var order []string
	f := newFake()
	spec := h.spec(&order, "alpha")
	spec.Resync = time.Minute
	b := controller.Build(spec, f)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = b.Run(ctx) }()

	require.Equal(t, "alpha", recv(t, f.started, "the lead's run").key)
	require.Eventually(t, func() bool { return !h.queued(t, "alpha") }, 10*time.Second, 5*time.Millisecond, "the lead's run done")
	resyncAt := h.clock.Now().Add(time.Minute)
	require.Eventually(t, func() bool { return slices.Contains(h.clock.Waits(), resyncAt) },
		10*time.Second, 5*time.Millisecond, "the resync waits for its minute")
	h.clock.Advance(time.Minute)
	s := recv(t, f.started, "the resync's run")
	require.Equal(t, "alpha", s.key)
	require.Contains(t, s.entry.Sources, "resync")
}

func TestRequired(t *testing.T) {
	type cfg struct {
		Store  *int
		Prober interface{ Probe() }
		Holder string
		Hook   func()
	}
	n := 1
	tests := []struct {
		name string
		c    cfg
		want []string
	}{
		{"all set", cfg{Store: &n, Prober: prober{}, Holder: "r1", Hook: func() {}}, nil},
		{"a zero struct in an interface is set", cfg{Store: &n, Prober: prober{}, Holder: "r1", Hook: func() {}}, nil},
		{"none set", cfg{}, []string{"x: Store is required", "x: Prober is required", "x: Holder is required", "x: Hook is required"}},
		{"a typed nil pointer is not set", cfg{Store: nil, Prober: (*prober)(nil), Holder: "r1", Hook: func() {}},
			[]string{"x: Store is required", "x: Prober is required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := controller.Required("x", controller.Need("Store", tc.c.Store), controller.Need("Prober", tc.c.Prober),
				controller.Need("Holder", tc.c.Holder), controller.Need("Hook", tc.c.Hook))
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			var msgs []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				msgs = append(msgs, e.Error())
			}
			require.Equal(t, tc.want, msgs)
		})
	}
	require.EqualError(t, controller.Required("", controller.Need("WorkDir", "")), "WorkDir is required")
}

type prober struct{}

func (prober) Probe() {}
