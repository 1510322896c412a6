package controller_test

import (
	"context"
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fake is a controller whose key is the tenant an event names; its runs
// report their start and, when gated, wait for a release or their context.
type fake struct {
	debounce time.Duration
	gated    bool

	started chan start

	mu       sync.Mutex
	active   map[string]int
	total    int
	maxTotal int
	overlap  bool
	finished []string
	scripted map[string][]controller.Result
	gates    map[string]chan struct{}
}

type start struct {
	key     string
	attempt int
	ctx     context.Context
	entry   controller.Entry
}

func newFake() *fake {
	return &fake{started: make(chan start, 64), active: map[string]int{}, scripted: map[string][]controller.Result{}, gates: map[string]chan struct{}{}}
}

// gate is where key's gated runs wait for a release.
func (f *fake) gate(key string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gates[key] == nil {
		f.gates[key] = make(chan struct{}, 8)
	}
	return f.gates[key]
}

// release lets one run of key end.
func (f *fake) release(key string) { f.gate(key) <- struct{}{} }

func (f *fake) Keys(_ context.Context, ev *domain.Event, _ uint64) ([]string, error) {
	return []string{ev.Object.Metadata.Name}, nil
}

func (f *fake) Due(_ string, e controller.Entry) time.Time { return e.Last.Add(f.debounce) }

func (f *fake) Reconcile(ctx context.Context, key string, e controller.Entry, attempt int) controller.Result {
	f.mu.Lock()
	f.active[key]++
	f.overlap = f.overlap || f.active[key] > 1
	f.total++
	f.maxTotal = max(f.maxTotal, f.total)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.active[key]--
		f.total--
		f.finished = append(f.finished, key)
		f.mu.Unlock()
	}()
	f.started <- start{key: key, attempt: attempt, ctx: ctx, entry: e}
	if f.gated {
		select {
		case <-f.gate(key):
		case <-ctx.Done():
			return controller.Retry()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.scripted[key]; len(s) > 0 {
		f.scripted[key] = s[1:]
		return s[0]
	}
	return controller.Done()
}

type harness struct {
	env   *eventstoretest.Env
	clock *controllertest.Clock
	cfg   controller.Config
}

func newHarness(t testing.TB) *harness {
	env := eventstoretest.Start(t)
	return &harness{env: env, clock: controllertest.NewClock(t0), cfg: controller.Config{
		Store: env.Store, Lease: "test", Holder: "replica-1", Queue: "test-queue",
		Consumer: jetstream.ConsumerConfig{Durable: "test", DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy: jetstream.AckExplicitPolicy},
		Kinds: []*domain.KindInfo{domain.TenantKind},
	}}
}

// run starts a runtime of c; the returned stop ends it and returns Run's error.
func (h *harness) run(t testing.TB, c controller.Controller) (rt *controller.Runtime, stop func() error) {
	cfg := h.cfg
	cfg.Clock = h.clock
	rt = controller.New(cfg, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the runtime did not stop")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return rt, stop
}

// touch writes an event for tenant: created the first time, relabelled after.
func (h *harness) touch(t testing.TB, tenant string) {
	ctx := context.Background()
	ref := domain.TenantRef(tenant)
	_, err := h.env.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			obj := &domain.Object{Metadata: domain.ObjectMeta{Name: tenant}}
			return domain.Decide(nil, domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: "test", Now: t0, NewUID: "uid-" + tenant})
		}
		obj := state.DeepCopy()
		obj.Metadata.ResourceVersion = ""
		if obj.Metadata.Labels == nil {
			obj.Metadata.Labels = map[string]string{}
		}
		obj.Metadata.Labels["n"] = obj.Metadata.Labels["n"] + "x"
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: obj, Actor: "test", Now: t0})
	})
	require.NoError(t, err)
}

func (h *harness) queued(t *testing.T, key string) bool {
	kv, err := h.env.Store.JetStream().KeyValue(context.Background(), h.cfg.Queue)
	require.NoError(t, err)
	_, err = kv.Get(context.Background(), key)
	return err == nil
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestOneRunPerKeyAndParallelAcrossKeysUpToTheBound(t *testing.T) {
	h := newHarness(t)
	h.cfg.Concurrency = 2
	f := newFake()
	f.gated = true
	_, stop := h.run(t, f)

	for _, k := range []string{"a", "b"} {
		h.touch(t, k)
	}
	// Two run; c waits for a free slot.
	first := map[string]bool{recv(t, f.started, "a run").key: true, recv(t, f.started, "a run").key: true}
	require.Equal(t, map[string]bool{"a": true, "b": true}, first)
	h.touch(t, "c")
	require.Eventually(t, func() bool { return h.queued(t, "c") }, 10*time.Second, 5*time.Millisecond, "c queued")

	// a changes while it runs: the follow-up waits for the run to end, then
	// goes first (its change is older than c's).
	h.touch(t, "a")
	require.Eventually(t, func() bool {
		kv, err := h.env.Store.JetStream().KeyValue(context.Background(), h.cfg.Queue)
		require.NoError(t, err)
		e, err := kv.Get(context.Background(), "a")
		var entry controller.Entry
		return err == nil && json.Unmarshal(e.Value(), &entry) == nil && len(entry.Sources) == 2
	}, 10*time.Second, 5*time.Millisecond, "a's change queued")
	f.release("a")
	require.Equal(t, "a", recv(t, f.started, "a's follow-up").key)
	f.release("b")
	require.Equal(t, "c", recv(t, f.started, "c").key)
	f.release("a")
	f.release("c")
	require.Eventually(t, func() bool { return !h.queued(t, "a") && !h.queued(t, "c") }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, stop())

	f.mu.Lock()
	defer f.mu.Unlock()
	require.False(t, f.overlap, "two runs of one key at once")
	require.Equal(t, 2, f.maxTotal, "runs at once beyond the bound")
	require.Equal(t, []string{"a", "b"}, f.finished[:2], "each run ended before the next of its slot began")
}

func TestDebounceBackoffAndRetry(t *testing.T) {
	h := newHarness(t)
	h.cfg.Backoff = func(n int) time.Duration { return time.Duration(n) * time.Minute }
	f := newFake()
	f.debounce = 2 * time.Second
	f.scripted["a"] = []controller.Result{controller.Retry(), controller.Retry(), controller.Done()}
	_, stop := h.run(t, f)

	h.touch(t, "a")
	// Nothing runs until the debounce has passed on the runtime's clock.
	require.Eventually(t, func() bool { return h.clock.Waiting().Equal(t0.Add(2 * time.Second)) }, 10*time.Second, 5*time.Millisecond)
	require.Empty(t, f.started)
	h.clock.Advance(2 * time.Second)
	require.Equal(t, 1, recv(t, f.started, "the first attempt").attempt)

	for _, wait := range []time.Duration{time.Minute, 2 * time.Minute} {
		now := h.clock.Now()
		require.Eventually(t, func() bool { return h.clock.Waiting().Equal(now.Add(wait)) }, 10*time.Second, 5*time.Millisecond, "backoff of %s", wait)
		require.Empty(t, f.started, "a retry before its backoff")
		h.clock.Advance(wait)
		recv(t, f.started, "a retry")
	}
	require.Eventually(t, func() bool { return !h.queued(t, "a") }, 10*time.Second, 5*time.Millisecond, "done: dequeued")
	require.NoError(t, stop())
}

func TestLaterIsNotAFailure(t *testing.T) {
	h := newHarness(t)
	h.cfg.Backoff = func(n int) time.Duration { return time.Duration(n) * time.Hour }
	f := newFake()
	f.scripted["a"] = []controller.Result{controller.Retry(), controller.Later(time.Second), controller.Retry(), controller.Done()}
	_, stop := h.run(t, f)
	h.touch(t, "a")
	var attempts []int
	attempts = append(attempts, recv(t, f.started, "run 1").attempt)
	for range 3 {
		require.Eventually(t, func() bool { return !h.clock.Waiting().IsZero() }, 10*time.Second, 5*time.Millisecond)
		h.clock.Advance(h.clock.Waiting().Sub(h.clock.Now()))
		attempts = append(attempts, recv(t, f.started, "the next run").attempt)
	}
	require.Equal(t, []int{1, 2, 2, 3}, attempts, "Later keeps the attempt count")
	require.NoError(t, stop())
}

// A Later run's wait ends when an event changes its key, after the run or
// during it: the run decided without that change, which runs on its
// debounce (an in-place config change does not wait for the maintenance
// window a rebooting one waits for).
func TestAChangeEndsALaterWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		during bool
		result controller.Result
		wait   time.Time // the run's wait, when nothing changes meanwhile
	}{
		{name: "after the run", result: controller.Later(time.Hour), wait: t0.Add(time.Hour + 2*time.Second)},
		{name: "during the run", during: true, result: controller.Later(time.Hour)},
		{name: "until an instant", result: controller.Until(t0.Add(time.Hour)), wait: t0.Add(time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			f := newFake()
			f.debounce = 2 * time.Second
			f.gated = true
			f.scripted["a"] = []controller.Result{tc.result, controller.Done()}
			_, stop := h.run(t, f)
			h.touch(t, "a")
			require.Eventually(t, func() bool { return h.clock.Waiting().Equal(t0.Add(2 * time.Second)) }, 10*time.Second, 5*time.Millisecond)
			h.clock.Advance(2 * time.Second)
			recv(t, f.started, "the first run")
			if tc.during {
				h.touch(t, "a")
				h.consumed(t)
			}
			f.release("a")
			if !tc.during {
				require.Eventually(t, func() bool { return slices.Contains(h.clock.Waits(), tc.wait) }, 10*time.Second, 5*time.Millisecond, "the run's wait")
				require.Empty(t, f.started)
				h.touch(t, "a")
				h.consumed(t)
			}
			// Due on the change's debounce (from t0+2s), not in an hour.
			require.Eventually(t, func() bool { return h.clock.Waiting().Equal(t0.Add(4 * time.Second)) }, 10*time.Second, 5*time.Millisecond, "the change's debounce")
			require.Empty(t, f.started)
			h.clock.Advance(2 * time.Second)
			recv(t, f.started, "the change's run")
			f.release("a")
			require.Eventually(t, func() bool { return !h.queued(t, "a") }, 10*time.Second, 5*time.Millisecond, "done: dequeued")
			require.NoError(t, stop())
		})
	}
}

func TestResumesQueuedWorkAfterARestart(t *testing.T) {
	h := newHarness(t)
	f := newFake()
	f.gated = true
	_, stop := h.run(t, f)
	h.touch(t, "a")
	s := recv(t, f.started, "a to start")
	require.NoError(t, stop())
	require.Error(t, s.ctx.Err(), "the run ended with the runtime")
	require.True(t, h.queued(t, "a"), "unfinished work stays queued")

	// The next process (or leader) resumes it with no new event.
	f2 := newFake()
	rt, stop2 := h.run(t, f2)
	require.Equal(t, "a", recv(t, f2.started, "a to resume").key)
	require.True(t, rt.Leading())
	require.Eventually(t, func() bool { return !h.queued(t, "a") }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, stop2())
	require.False(t, rt.Leading())
}

func TestStopsOnCancelWithNoGoroutineLeft(t *testing.T) {
	h := newHarness(t)
	h.cfg.Resync = time.Minute
	before := clientGoroutines()
	f := newFake()
	f.gated = true
	_, stop := h.run(t, f)
	h.touch(t, "a")
	s := recv(t, f.started, "a to start")
	require.Greater(t, len(clientGoroutines()), len(before), "the check sees the runtime's goroutines")
	require.NoError(t, stop())
	require.Error(t, s.ctx.Err())
	// The server's goroutines (the streams and consumers it keeps) are not
	// the runtime's; every goroutine of the runtime and of its client side
	// (lease renewal, watches, pull consumers) must be gone.
	var left []string
	require.Eventually(t, func() bool {
		left = nil
		for id, stack := range clientGoroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, stack)
			}
		}
		return len(left) == 0
	}, 5*time.Second, 10*time.Millisecond, "goroutines left: %v", left)
}

// clientGoroutines are the stacks, by goroutine header, of goroutines in
// this package's runtime, the event store or the JetStream client.
func clientGoroutines() map[string]string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "rezuscloud/internal/controller.") || strings.Contains(g, "rezuscloud/eventstore.") || strings.Contains(g, "nats.go/jetstream.") {
			if strings.Contains(g, "clientGoroutines") {
				continue
			}
			header, _, _ := strings.Cut(g, " [") // "goroutine N", without its state
			out[header] = g
		}
	}
	return out
}

func TestLeaseLossCancelsRunningWork(t *testing.T) {
	h := newHarness(t)
	h.cfg.LeaseTTL = time.Second
	f := newFake()
	f.gated = true
	rt, stop := h.run(t, f)
	h.touch(t, "a")
	s := recv(t, f.started, "a to start")
	require.True(t, rt.Leading())

	// The lease expired while this replica was paused, and another took it.
	ctx := context.Background()
	kv, err := h.env.Store.JetStream().KeyValue(ctx, eventstore.LeaseBucket)
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctx, h.cfg.Lease))
	_, err = kv.Create(ctx, h.cfg.Lease, []byte("replica-2"))
	require.NoError(t, err)

	select {
	case <-s.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the run went on after the lease was lost")
	}
	require.Eventually(t, func() bool { return !rt.Leading() }, 5*time.Second, 5*time.Millisecond)
	require.True(t, h.queued(t, "a"), "the interrupted work stays queued for the next leader")
	// replica-2 never renews: its lease expires, and this replica resumes.
	require.Equal(t, "a", recv(t, f.started, "a to resume").key)
	require.NoError(t, stop())
}

func TestEnqueueKeepsFirstAndBoundsSources(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := context.Background()
	kv, err := controller.OpenQueue(ctx, env.Store, "q", "test")
	require.NoError(t, err)
	tests := []struct {
		name   string
		source string
		at     time.Duration
		want   []string
	}{
		{"first", "s1", 0, []string{"s1"}},
		{"another", "s2", time.Second, []string{"s1", "s2"}},
		{"repeated", "s1", 2 * time.Second, []string{"s1", "s2"}},
		{"over the bound", "s3", 3 * time.Second, []string{"s2", "s3"}},
		{"no source", "", 4 * time.Second, []string{"s2", "s3"}},
		// Writes of one key race: an earlier one landing last keeps Last.
		{"an earlier write after a later one", "s3", 3 * time.Second, []string{"s2", "s3"}},
	}
	var last time.Duration
	for _, tc := range tests {
		last = max(last, tc.at)
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, controller.Enqueue(ctx, kv, "k", tc.source, t0.Add(tc.at), 2))
			e, err := kv.Get(ctx, "k")
			require.NoError(t, err)
			var got controller.Entry
			require.NoError(t, json.Unmarshal(e.Value(), &got))
			require.Equal(t, t0, got.First.UTC())
			require.Equal(t, t0.Add(last), got.Last.UTC(), "the latest write's time")
			require.Equal(t, tc.want, got.Sources)
		})
	}
}

func TestExponentialBackoff(t *testing.T) {
	b := controller.Exponential(time.Second, 30*time.Second)
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 30 * time.Second} {
		for range 20 {
			d := b(n)
			require.GreaterOrEqual(t, d, want/2, "retry %d", n)
			require.LessOrEqual(t, d, want, "retry %d", n)
		}
	}
}

// The runtime hands Keys only the events of its Kinds, told apart by
// subject; the consumer takes the whole stream through one filter (a
// consumer left with several filter subjects by an older version is
// changed in place and keeps its position).
func TestKindsFilterEventsBySubject(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	old := h.cfg.Consumer
	old.FilterSubjects = []string{domain.SubjectFilter(domain.TenantKind, "", ""), domain.SubjectFilter(domain.ProviderKind, "", "")}
	_, err := h.env.Store.JetStream().CreateConsumer(ctx, eventstore.StreamName, old)
	require.NoError(t, err)

	ref := domain.Ref{Kind: domain.ProviderKind.Kind, Name: "p1"}
	_, err = h.env.Store.Update(ctx, ref, eventstore.UpdateOptions{}, func(state *domain.Object) ([]domain.Event, error) {
		obj := &domain.Object{Metadata: domain.ObjectMeta{Name: "p1"}, Spec: json.RawMessage(`{"type":"emulated"}`)}
		return domain.Decide(nil, domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: "test", Now: t0, NewUID: "uid-p1"})
	})
	require.NoError(t, err)
	h.touch(t, "acme")

	f := newFake()
	h.run(t, f)
	require.Equal(t, "acme", recv(t, f.started, "a run").key)
	cons, err := h.env.Store.JetStream().Consumer(ctx, eventstore.StreamName, "test")
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, controller.AllEvents, info.Config.FilterSubject)
	require.Empty(t, info.Config.FilterSubjects)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, 10*time.Second, 10*time.Millisecond, "both events consumed")
	require.False(t, h.queued(t, "p1"), "a Provider event reached Keys")
	select {
	case s := <-f.started:
		t.Fatalf("unexpected run of %s", s.key)
	default:
	}
}
