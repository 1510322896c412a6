package controller_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/internal/controller"
)

// members are the heartbeats as the test drives them: who is live, and
// when each replica's last stored heartbeat was sent (frozen for one cut
// off from the others).
type members struct {
	mu     sync.Mutex
	live   map[string]bool
	frozen map[string]time.Time
	subs   []chan struct{}
}

const testTTL, testInterval = 3 * time.Second, time.Second

func (m *members) set(id string, live bool) {
	m.mu.Lock()
	m.live[id] = live
	subs := slices.Clone(m.subs)
	m.mu.Unlock()
	for _, c := range subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// member is one replica's view of members.
type member struct {
	m       *members
	id      string
	changed chan struct{}
}

func (v member) ID() string     { return v.id }
func (v member) Holder() string { return "holder-" + v.id }
func (v member) View() eventstore.ReplicaView {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	var out eventstore.ReplicaView
	for id, live := range v.m.live {
		if live {
			out.Replicas = append(out.Replicas, eventstore.Replica{Holder: "holder-" + id, ID: id})
		}
	}
	return out
}
func (v member) LastBeat() time.Time {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	if at, ok := v.m.frozen[v.id]; ok {
		return at
	}
	return time.Now()
}
func (v member) TTL() time.Duration { return testTTL }
func (v member) Alive(_ context.Context, _, id string) (bool, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return v.m.live[id], nil
}
func (v member) Interval() time.Duration  { return testInterval }
func (v member) Changed() <-chan struct{} { return v.changed }
func (m *members) view(id string) member {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(chan struct{}, 1)
	m.subs = append(m.subs, c)
	return member{m: m, id: id, changed: c}
}

// journal records runs across replicas in order.
type journal struct {
	mu      sync.Mutex
	lines   []string
	active  map[string]string // tenant -> replica running it
	overlap []string
	ran     map[string]map[string]int // replica -> tenant -> runs
	gates   map[string]chan struct{}
	started chan string
}

func (j *journal) gate(tenant string) chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.gates[tenant]
}

// worker is one replica's controller: it runs a tenant, journaling it.
type worker struct {
	j       *journal
	replica string
}

func (w worker) Keys(_ context.Context, ev *domain.Event, _ uint64) ([]string, error) {
	return []string{ev.Object.Metadata.Name}, nil
}
func (w worker) Due(_ string, e controller.Entry) time.Time { return e.Last }
func (w worker) Reconcile(ctx context.Context, key string, _ controller.Entry, _ int) controller.Result {
	j := w.j
	j.mu.Lock()
	if other, ok := j.active[key]; ok {
		j.overlap = append(j.overlap, fmt.Sprintf("%s on %s and %s", key, other, w.replica))
	}
	j.active[key] = w.replica
	if j.ran[w.replica] == nil {
		j.ran[w.replica] = map[string]int{}
	}
	j.ran[w.replica][key]++
	j.lines = append(j.lines, "start "+key+" "+w.replica)
	j.mu.Unlock()
	select {
	case j.started <- key + " " + w.replica:
	default:
	}
	result := controller.Done()
	if g := j.gate(key); g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			result = controller.Retry()
		}
	}
	j.mu.Lock()
	delete(j.active, key)
	j.lines = append(j.lines, "end "+key+" "+w.replica)
	j.mu.Unlock()
	return result
}

type cluster struct {
	env     *eventstoretest.Env
	members *members
	j       *journal
	tenants []string
	stops   map[string]func()
	claims  map[string]*controller.Tenants
}

func newCluster(t *testing.T, n int) *cluster {
	c := &cluster{env: eventstoretest.Start(t), members: &members{live: map[string]bool{}, frozen: map[string]time.Time{}},
		j:     &journal{active: map[string]string{}, ran: map[string]map[string]int{}, gates: map[string]chan struct{}{}, started: make(chan string, 256)},
		stops: map[string]func(){}, claims: map[string]*controller.Tenants{}}
	for i := range 12 {
		c.tenants = append(c.tenants, fmt.Sprintf("tenant-%02d", i))
	}
	for i := range n {
		c.start(t, fmt.Sprintf("r%d", i))
	}
	return c
}

func (c *cluster) start(t *testing.T, id string) {
	ctx, cancel := context.WithCancel(context.Background())
	ts := controller.NewTenants(controller.TenantsConfig{Store: c.env.Store, Members: c.members.view(id),
		Names: func() []string { return c.tenants }, Grace: time.Minute})
	rt := controller.New(controller.Config{
		Store: c.env.Store, Lease: "test", Holder: "holder-" + id, Queue: "test-queue",
		Consumer: jetstream.ConsumerConfig{Durable: "test", DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckExplicitPolicy},
		Kinds:    []*domain.KindInfo{domain.TenantKind}, Concurrency: 4, Tenants: ts,
		Backoff: func(int) time.Duration { return 100 * time.Millisecond },
	}, worker{j: c.j, replica: id})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = ts.Run(ctx) }()
	go func() { defer wg.Done(); _ = rt.Run(ctx) }()
	c.members.set(id, true)
	c.claims[id] = ts
	var once sync.Once
	c.stops[id] = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(c.stops[id])
}

func (c *cluster) touch(t *testing.T, tenant string) {
	h := &harness{env: c.env}
	h.touch(t, tenant)
}

// ranOn reports, for each replica, how many of the tenants it ran.
func (c *cluster) ranOn() map[string]int {
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	out := map[string]int{}
	for r, ts := range c.j.ran {
		out[r] = len(ts)
	}
	return out
}

func (c *cluster) ranBy(replica, tenant string) int {
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	return c.j.ran[replica][tenant]
}

func TestTenantsAreSpreadOverTheReplicasAndMoveWhenOneIsLost(t *testing.T) {
	c := newCluster(t, 3)
	for _, tn := range c.tenants {
		c.touch(t, tn)
	}
	require.Eventually(t, func() bool {
		n := 0
		for _, v := range c.ranOn() {
			n += v
		}
		return n == len(c.tenants)
	}, 20*time.Second, 20*time.Millisecond, "every tenant runs once: %v", c.ranOn())
	spread := c.ranOn()
	require.GreaterOrEqual(t, len(spread), 2, "runs on at least two replicas: %v", spread)
	for r, n := range spread {
		require.LessOrEqual(t, n, 8, "%s ran more than two thirds: %v", r, spread)
	}
	for id, ts := range c.claims {
		require.Eventually(t, func() bool { return ts.Count() == spread[id] }, 10*time.Second, 10*time.Millisecond,
			"%s holds the tenants it ran", id)
	}

	// r1 is lost (its heartbeat expires): its tenants' next changes run on
	// the others, once.
	lost := c.claims["r1"].Held()
	c.stops["r1"]()
	c.members.set("r1", false)
	for _, tn := range lost {
		c.touch(t, tn)
	}
	for _, tn := range lost {
		require.Eventually(t, func() bool { return c.ranBy("r0", tn)+c.ranBy("r2", tn) == 1 }, 20*time.Second, 20*time.Millisecond,
			"%s moved to a survivor", tn)
	}
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	require.Empty(t, c.j.overlap)
}

func TestAJoiningReplicaGetsItsShareAfterTheRunsInFlight(t *testing.T) {
	c := newCluster(t, 2)
	// Which tenants r2 will own, and one of them held back in a run.
	var moving []string
	for _, tn := range c.tenants {
		if controller.Owner([]string{"r0", "r1", "r2"}, tn) == "r2" {
			moving = append(moving, tn)
		}
	}
	require.NotEmpty(t, moving)
	held := moving[0]
	c.j.gates[held] = make(chan struct{}, 1)
	for _, tn := range c.tenants {
		c.touch(t, tn)
	}
	var first string
	for ev := range c.j.started {
		if len(ev) > len(held) && ev[:len(held)] == held {
			first = ev[len(held)+1:]
			break
		}
	}
	c.start(t, "r2")
	for _, tn := range moving[1:] {
		require.Eventually(t, func() bool { return slices.Contains(c.claims["r2"].Held(), tn) }, 20*time.Second, 20*time.Millisecond,
			"%s moves to r2", tn)
	}
	// The tenant in flight stays until its run ends.
	require.NotContains(t, c.claims["r2"].Held(), held)
	c.touch(t, held) // a change while it runs: the follow-up runs on r2
	c.j.gates[held] <- struct{}{}
	require.Eventually(t, func() bool { return c.ranBy("r2", held) == 1 }, 20*time.Second, 20*time.Millisecond, "the follow-up ran on r2")
	require.Equal(t, 1, c.ranBy(first, held))
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	require.Empty(t, c.j.overlap)
}

func TestAReplicaCutOffStopsBeforeAnotherStarts(t *testing.T) {
	c := newCluster(t, 2)
	tn := c.tenants[0]
	c.j.gates[tn] = make(chan struct{}, 1)
	c.touch(t, tn)
	ev := <-c.j.started
	victim := ev[len(tn)+1:]
	other := "r0"
	if victim == "r0" {
		other = "r1"
	}
	// Cut off: its heartbeat stops being stored now; the others see it
	// expire a TTL later.
	cut := time.Now()
	c.members.mu.Lock()
	c.members.frozen[victim] = cut
	c.members.mu.Unlock()
	expired := time.AfterFunc(testTTL, func() { c.members.set(victim, false) })
	defer expired.Stop()
	c.touch(t, tn) // the change the survivor runs
	require.Eventually(t, func() bool { return c.ranBy(other, tn) == 1 }, 20*time.Second, 20*time.Millisecond)
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	end := slices.Index(c.j.lines, "end "+tn+" "+victim)
	start := slices.Index(c.j.lines, "start "+tn+" "+other)
	require.NotEqual(t, -1, end, "the cut-off replica's run ended: %v", c.j.lines)
	require.Less(t, end, start, "it ended before the other replica started: %v", c.j.lines)
	require.Empty(t, c.j.overlap)
}
