package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// ClaimsBucket holds which replica works each tenant: key the tenant,
// value a claimRecord. Claims change only by compare-and-set on the key's
// revision, so two replicas never hold one tenant; a claim of a replica
// whose heartbeat is gone (eventstore.ReplicasBucket) is free.
const ClaimsBucket = "rezus-tenant-claims"

// claimVersion is the version of the claim record written.
const claimVersion = 1

// claimRecord is the value of a tenant's key in ClaimsBucket.
type claimRecord struct {
	Version int `json:"v"`
	// Member is the holder's incarnation (eventstore.Replica.ID).
	Member string `json:"member"`
	// Holder names the replica, for people.
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
}

// Membership is the replicas' heartbeats (eventstore.Replicas).
type Membership interface {
	// ID is this replica's incarnation; Holder its name.
	ID() string
	Holder() string
	// View is what the heartbeats said at the last read.
	View() eventstore.ReplicaView
	// LastBeat is when this replica's last stored heartbeat was sent; TTL
	// how long a heartbeat outlives it; Interval how often it beats.
	LastBeat() time.Time
	TTL() time.Duration
	Interval() time.Duration
	// Changed is signalled after each read of the heartbeats.
	Changed() <-chan struct{}
	// Alive reads whether replica holder beats now in run id: a claim is
	// taken from a member only once its heartbeat is gone, whatever the
	// last view said (a replica that started after it was read is in no
	// view yet).
	Alive(ctx context.Context, holder, id string) (bool, error)
}

// TenantsConfig configures Tenants. Store, Members and Names are required.
type TenantsConfig struct {
	Store   *eventstore.Store
	Members Membership
	// Names lists the tenants of the read model (projections.Cache.Names).
	Names func() []string
	// Grace is how long a tenant this replica gives up waits for its runs
	// here to end before they are canceled (they are resumable); default
	// one minute.
	Grace time.Duration
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Validate reports the required fields not set.
func (c *TenantsConfig) Validate() error {
	return Required("tenant claims", Need("Store", c.Store), Need("Members", c.Members), Need("Names", c.Names))
}

// Tenants is this replica's share of the tenants: it claims the tenants
// rendezvous hashing gives it among the live replicas (DecideClaims),
// hands a tenant over when a replica joins that owns it, and takes the
// tenants of a replica whose heartbeat is gone. The runtimes given it
// (Config.Tenants) run a tenant's keys only while it holds the tenant
// (Begin), with a context that ends when the hold does.
//
// Fencing: a replica works its tenants only while its own heartbeat is
// fresh, less than TTL - Interval/2 after the last one stored was sent;
// another replica takes them only once that heartbeat has expired (TTL
// after it was stored), so a replica cut off from the others stops before
// anyone starts. Every append a run makes checks its hold first
// (eventstore.WithFence).
type Tenants struct {
	cfg  TenantsConfig
	kv   jetstream.KeyValue
	wake chan struct{}

	mu       sync.Mutex
	fresh    bool
	legacy   bool
	claims   map[string]Claim
	held     map[string]*hold
	wanted   map[string]time.Time
	onDemand map[string]bool
	subs     []*tenantSub
	terms    uint64
	drained  chan struct{}
}

// hold is this replica's hold of a tenant.
type hold struct {
	rev       uint64
	term      uint64
	ctx       context.Context
	cancel    context.CancelCauseFunc
	runs      int
	releasing bool
	idle      chan struct{} // closed when runs reach 0 while releasing
}

// tenantSub is a runtime told when holds change.
type tenantSub struct {
	changed chan struct{}
	flush   func(ctx context.Context, tenant string)
}

// Errors a hold ends with.
var (
	errStale    = fmt.Errorf("%w: this replica's heartbeat is not fresh: its tenants may be taken", eventstore.ErrFenced)
	errLost     = fmt.Errorf("%w: another replica holds the tenant", eventstore.ErrFenced)
	errGivenUp  = errors.New("the tenant moved to another replica")
	errNotOwner = errors.New("this replica does not hold the tenant")
)

// NewTenants returns the claims of this replica; Run starts them.
func NewTenants(cfg TenantsConfig) *Tenants {
	if cfg.Grace <= 0 {
		cfg.Grace = time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Tenants{cfg: cfg, wake: make(chan struct{}, 1), claims: map[string]Claim{}, held: map[string]*hold{},
		wanted: map[string]time.Time{}, onDemand: map[string]bool{}, drained: make(chan struct{})}
}

// Count is how many tenants this replica holds.
func (t *Tenants) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.held)
}

// Held lists the tenants this replica holds, sorted.
func (t *Tenants) Held() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.held))
	for k := range t.held {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Legacy reports whether a replica of a release before claims runs too:
// then a tenant runs only where its controller's lease is held.
func (t *Tenants) Legacy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.legacy
}

// Drained is closed once Run has ended and no run holds a tenant: the
// heartbeat may then be taken out (another replica takes the tenants at
// once).
func (t *Tenants) Drained() <-chan struct{} { return t.drained }

// Hold is a run's hold of its tenant.
type Hold struct {
	// Ctx ends when the hold does (the tenant moves, the heartbeat goes
	// stale); appends made with it check the hold first.
	Ctx context.Context
	// Term changes each time this replica takes the tenant again.
	Term uint64
	// End says the run is over.
	End func()
}

// Begin holds tenant for a run: ok is false when this replica does not
// hold it (it is then noted as wanted, so that its owner claims it even
// before its read model has it). leading says the runtime holds its
// controller's lease, which a run needs while a replica of a release
// before claims runs (Legacy).
func (t *Tenants) Begin(tenant string, leading bool) (Hold, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.held[tenant]
	if !t.fresh || h == nil || h.releasing || (t.legacy && !leading) {
		t.wanted[tenant] = time.Now()
		if t.legacy && leading && h == nil {
			t.onDemand[tenant] = true
		}
		t.poke()
		return Hold{}, false
	}
	delete(t.onDemand, tenant)
	h.runs++
	ended := false
	end := func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if ended {
			return
		}
		ended = true
		h.runs--
		if h.runs == 0 {
			if h.releasing && h.idle != nil {
				close(h.idle)
				h.idle = nil
			}
			if t.legacy {
				t.poke() // an idle claim is dropped
			}
		}
	}
	return Hold{Ctx: h.ctx, Term: h.term, End: end}, true
}

// Holds reports whether runs of tenant may start here now (legacy lease
// aside).
func (t *Tenants) Holds(tenant string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.held[tenant]
	return t.fresh && h != nil && !h.releasing
}

// whileHeld runs fn under the hold's lock if tenant is held and not being
// given up, and returns what fn returns (false if not held): a change
// absorbed in memory by a runtime here cannot slip past a hand-over, which
// flushes absorbed changes after marking the tenant given up.
func (t *Tenants) whileHeld(tenant string, fn func() bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.held[tenant]
	if !t.fresh || h == nil || h.releasing {
		return false
	}
	return fn()
}

// subscribe registers a runtime: changed is signalled when holds change,
// flush is called for a tenant being given up, after no change for it can
// be absorbed any more.
func (t *Tenants) subscribe(flush func(ctx context.Context, tenant string)) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &tenantSub{changed: make(chan struct{}, 1), flush: flush}
	t.subs = append(t.subs, s)
	return s.changed
}

func (t *Tenants) notifyLocked() {
	for _, s := range t.subs {
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

func (t *Tenants) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// fence is what a run's appends check: the hold is still this one.
func (t *Tenants) fence(tenant string, h *hold) func() error {
	return func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.fresh || !t.freshNow() {
			return errStale
		}
		if t.held[tenant] != h {
			return fmt.Errorf("tenant %s: %w", tenant, errNotOwner)
		}
		return nil
	}
}

// freshNow reports whether this replica's heartbeat is fresh now, by the
// clock rather than by the last step: a process that was stopped (SIGSTOP,
// a long pause) writes nothing once it may have been taken over.
func (t *Tenants) freshNow() bool {
	m := t.cfg.Members
	last := m.LastBeat()
	return !last.IsZero() && time.Now().Before(last.Add(m.TTL()-m.Interval()/2))
}

// record encodes this replica's claim.
func (t *Tenants) record() []byte {
	return mustJSON(claimRecord{Version: claimVersion, Member: t.cfg.Members.ID(), Holder: t.cfg.Members.Holder(), Since: time.Now().UTC()})
}

// decodeClaim reads a claim record; an unreadable one names nobody live.
func decodeClaim(raw []byte, rev uint64) Claim {
	var r claimRecord
	if json.Unmarshal(raw, &r) != nil {
		return Claim{Rev: rev}
	}
	return Claim{Member: r.Member, Rev: rev, Holder: r.Holder}
}

// ClaimHolder names the replica in a claim record, for people
// (GET /api/v1/replicas); "" if unreadable.
func ClaimHolder(raw []byte) string {
	var r claimRecord
	if json.Unmarshal(raw, &r) != nil {
		return ""
	}
	return r.Holder
}
