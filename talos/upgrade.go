package talos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// UpgradeLease makes one replica at a time run the upgrade saga.
const UpgradeLease = "upgrade-saga"

// UpgradeConsumer is the saga's durable consumer of tenant, node group and
// upgrade events. Renaming it loses the events not yet handled: a new
// consumer starts after the read model it remembers the versions from.
const UpgradeConsumer = "upgrade-saga"

// UpgradeActor is the actor of the saga's own writes.
const UpgradeActor = "system:upgrade-saga"

// UpgradeConfig configures the saga. Store, Cache, Bundles and Holder are
// required; every other field has the default its comment gives.
type UpgradeConfig struct {
	Store *eventstore.Store
	Cache *projections.Cache
	// Bundles gives each tenant's PKI (a *PKI).
	Bundles BundleSource
	// Holder names this replica in the saga's lease.
	Holder string
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Endpoint is the Talos API (host:port) of a machine; default its
	// spec.address on port 50000.
	Endpoint func(m *domain.Machine) (string, error)
	// Installer is the installer image of a Talos version; default InstallerImage.
	Installer func(version string) string
	// CallTimeout bounds one Talos API call; default 10s.
	CallTimeout time.Duration
	// PollInterval is how often a node is asked while the saga waits for it; default 2s.
	PollInterval time.Duration
	// PrecheckTimeout is how long a machine's step waits for the node to be
	// reachable and, for a control plane, for etcd to keep quorum without it,
	// before the run fails; default 5m.
	PrecheckTimeout time.Duration
	// RebootTimeout is how long a node may take to install, go down and come
	// back on the target (or, in a rollback, on its old version); default 20m.
	RebootTimeout time.Duration
	// HealthTimeout is how long a node back on the target may take to be
	// healthy before the step fails and the node is rolled back; default 10m.
	HealthTimeout time.Duration
	// Concurrency is how many tenants upgrade at once; default 4.
	Concurrency int
	// Resync is how often runs are looked at without an event; default 30s.
	Resync time.Duration
	// RetryBackoff is the pause before a run that stopped on an error of the
	// saga's own (not a failed step) is resumed; default 10s.
	RetryBackoff time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// DialOptions are added to every connection to a node (tests count the
	// upgrade calls with an interceptor).
	DialOptions []grpc.DialOption
}

func (c *UpgradeConfig) setDefaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Endpoint == nil {
		c.Endpoint = machineEndpoint
	}
	if c.Installer == nil {
		c.Installer = InstallerImage
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = 2 * time.Second
	}
	if c.PrecheckTimeout == 0 {
		c.PrecheckTimeout = 5 * time.Minute
	}
	if c.RebootTimeout == 0 {
		c.RebootTimeout = 20 * time.Minute
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = 10 * time.Minute
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Resync == 0 {
		c.Resync = 30 * time.Second
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// UpgradeSaga drives rolling Talos upgrades: it turns changes of a tenant's
// or node group's talosVersion into Upgrade runs, and carries out each run
// machine by machine through the Talos API, recording every step as a status
// event of the Upgrade, so that whichever replica holds the lease next
// resumes where the last one stopped.
type UpgradeSaga struct {
	cfg  UpgradeConfig
	kick chan struct{}

	mu      sync.Mutex
	runs    map[string]*upgradeRun // by tenant, while running here
	leading bool
}

// NewUpgradeSaga returns the saga; Run starts it.
func NewUpgradeSaga(cfg UpgradeConfig) *UpgradeSaga {
	cfg.setDefaults()
	return &UpgradeSaga{cfg: cfg, kick: make(chan struct{}, 1), runs: map[string]*upgradeRun{}}
}

// Leading reports whether this replica holds the saga's lease.
func (s *UpgradeSaga) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// ActiveUpgrade reports whether the tenant has an upgrade that has not
// finished (running or waiting to); see the function ActiveUpgrade.
func (s *UpgradeSaga) ActiveUpgrade(tenant string) bool {
	_, ok := ActiveUpgrade(s.cfg.Cache, tenant)
	return ok
}

// ActiveUpgrade names the tenant's oldest upgrade that has not finished
// (Pending or Running), if any. It reads the replicated read model, so any
// replica can ask: the apply worker holds back version-specific config while
// it reports true.
func ActiveUpgrade(cache *projections.Cache, tenant string) (string, bool) {
	runs := unfinishedUpgrades(cache, tenant)
	if len(runs) == 0 {
		return "", false
	}
	return runs[0].Metadata.Name, true
}

// unfinishedUpgrades lists a tenant's (or, for "", every tenant's) upgrades
// that are not final, oldest first.
func unfinishedUpgrades(cache *projections.Cache, tenant string) []domain.Upgrade {
	res, err := cache.List(domain.UpgradeKind.Kind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil
	}
	var out []domain.Upgrade
	for _, raw := range res.Items {
		var u domain.Upgrade
		if json.Unmarshal(raw, &u) == nil && !u.Status.Final() {
			out = append(out, u)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Metadata.CreationTimestamp, out[j].Metadata.CreationTimestamp
		if a != nil && b != nil && !a.Equal(*b) {
			return a.Before(*b)
		}
		return out[i].Metadata.Name < out[j].Metadata.Name
	})
	return out
}

// Run provisions the consumer and the trigger's bucket and runs the saga
// while this replica holds the lease, until ctx ends.
func (s *UpgradeSaga) Run(ctx context.Context) error {
	kv, err := openVersionsBucket(ctx, s.cfg.Store)
	if err != nil {
		return err
	}
	if err := s.provisionConsumer(ctx, kv); err != nil {
		return err
	}
	leases, err := eventstore.OpenLeases(ctx, s.cfg.Store, eventstore.LeaseTTL)
	if err != nil {
		return err
	}
	return leases.RunWhileHeld(ctx, UpgradeLease, s.cfg.Holder, func(ctx context.Context) error {
		return s.lead(ctx, kv)
	})
}

// provisionConsumer creates the durable consumer the first time: the node
// groups' versions are remembered as the read model has them at a sequence,
// and the consumer delivers the events after it, so that no version change is
// missed nor taken for one. Later starts find it and go on where it was.
func (s *UpgradeSaga) provisionConsumer(ctx context.Context, kv jetstream.KeyValue) error {
	js := s.cfg.Store.JetStream()
	_, err := js.Consumer(ctx, eventstore.StreamName, UpgradeConsumer)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("looking up consumer %s: %w", UpgradeConsumer, err)
	}
	if err := s.cfg.Cache.Sync(ctx); err != nil {
		return err
	}
	seq := s.cfg.Cache.Seq()
	if err := s.rememberVersions(ctx, kv); err != nil {
		return err
	}
	var subjects []string
	for _, k := range []*domain.KindInfo{domain.TenantKind, domain.NodeGroupKind, domain.UpgradeKind} {
		subjects = append(subjects, domain.SubjectPrefix+"."+k.Subject+".>")
	}
	_, err = js.CreateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{
		Durable: UpgradeConsumer, Description: "starts and steers Talos upgrade runs",
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq + 1, AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubjects: subjects, AckWait: 30 * time.Second, MaxAckPending: 256,
	})
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("provisioning consumer %s: %w", UpgradeConsumer, err)
	}
	return nil
}

func (s *UpgradeSaga) lead(ctx context.Context, kv jetstream.KeyValue) error {
	s.setLeading(true)
	defer s.setLeading(false)
	if err := s.cfg.Cache.Sync(ctx); err != nil {
		return err
	}
	s.cfg.Log.Info("upgrade saga leading", "holder", s.cfg.Holder)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.consume(gctx, kv) })
	g.Go(func() error { return s.schedule(gctx) })
	return g.Wait()
}

func (s *UpgradeSaga) setLeading(v bool) {
	s.mu.Lock()
	s.leading = v
	s.mu.Unlock()
}

// wake makes the scheduler look at the runs now.
func (s *UpgradeSaga) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// consume handles events in stream order: version changes start runs, new
// runs and cancel requests wake the scheduler.
func (s *UpgradeSaga) consume(ctx context.Context, kv jetstream.KeyValue) error {
	return s.cfg.Store.ConsumeDurable(ctx, UpgradeConsumer, s.cfg.Log, func(ctx context.Context, msg jetstream.Msg) error {
		return s.handleEvent(ctx, kv, msg)
	})
}

func (s *UpgradeSaga) handleEvent(ctx context.Context, kv jetstream.KeyValue, msg jetstream.Msg) error {
	ev := &domain.Event{}
	if err := json.Unmarshal(msg.Data(), ev); err != nil || ev.Object == nil {
		return nil
	}
	// Status changes (the saga's own among them) change no version and no run.
	if strings.HasSuffix(ev.Type, "StatusUpdated") {
		return nil
	}
	md, err := msg.Metadata()
	if err != nil {
		return err
	}
	seq := md.Sequence.Stream
	// Decide on a read model that has this event.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = s.cfg.Cache.WaitFor(wctx, seq)
	cancel()
	if err != nil {
		return err
	}
	switch ev.Object.Kind {
	case domain.UpgradeKind.Kind:
		if ev.Type == "UpgradeCancelRequested" {
			ref := ev.Object.Ref()
			s.mu.Lock()
			r := s.runs[ref.Tenant]
			active := r != nil && r.ref.Name == ref.Name
			if active {
				r.canceled.Store(true)
			}
			s.mu.Unlock()
			if !active {
				// Queued behind another run of the tenant: it ends now.
				if err := s.cancelPending(ctx, ref); err != nil {
					return err
				}
			}
		}
		s.wake()
		return nil
	case domain.TenantKind.Kind, domain.NodeGroupKind.Kind:
		return s.trigger(ctx, kv, ev, seq)
	}
	return nil
}

// cancelPending ends a run that has not started, on a cancel request.
func (s *UpgradeSaga) cancelPending(ctx context.Context, ref domain.Ref) error {
	now := s.cfg.Now().UTC()
	_, err := s.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 20}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, nil
		}
		var u domain.Upgrade
		if err := json.Unmarshal(upgradeJSON(state), &u); err != nil {
			return nil, err
		}
		if u.Status.Phase != domain.UpgradePending {
			return nil, nil
		}
		u.Status.Phase, u.Status.Reason, u.Status.EndTime = domain.UpgradeCanceled, "canceled before it started", &now
		obj := state.DeepCopy()
		obj.Status = upgradeJSON(u.Status)
		return domain.Decide(state, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Object: obj, Actor: UpgradeActor, Now: now})
	})
	return err
}

// schedule starts runs: per tenant the Running one (resumed after a restart)
// or else the oldest Pending one, up to Concurrency tenants at once.
func (s *UpgradeSaga) schedule(ctx context.Context) error {
	type ended struct {
		tenant string
		err    error
	}
	results := make(chan ended)
	notBefore := map[string]time.Time{}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	ticker := time.NewTicker(s.cfg.Resync)
	defer ticker.Stop()
	for {
		now := s.cfg.Now()
		for _, u := range s.due(now, notBefore) {
			r := &upgradeRun{s: s, ref: domain.Ref{Kind: domain.UpgradeKind.Kind, Tenant: u.Metadata.Tenant, Name: u.Metadata.Name}}
			s.mu.Lock()
			s.runs[r.ref.Tenant] = r
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := r.execute(ctx)
				select {
				case results <- ended{tenant: r.ref.Tenant, err: err}:
				case <-ctx.Done():
				}
			}()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		case <-ticker.C:
		case e := <-results:
			s.mu.Lock()
			delete(s.runs, e.tenant)
			s.mu.Unlock()
			if e.err != nil && ctx.Err() == nil {
				s.cfg.Log.Warn("upgrade saga: a run stopped; resuming it later", "tenant", e.tenant, "err", e.err, "after", s.cfg.RetryBackoff)
				notBefore[e.tenant] = s.cfg.Now().Add(s.cfg.RetryBackoff)
			}
		}
	}
}

// due picks the runs to start now: one per tenant not running here, within
// the concurrency.
func (s *UpgradeSaga) due(now time.Time, notBefore map[string]time.Time) []domain.Upgrade {
	s.mu.Lock()
	busy := len(s.runs)
	running := map[string]bool{}
	for t := range s.runs {
		running[t] = true
	}
	s.mu.Unlock()
	var out []domain.Upgrade
	seen := map[string]bool{}
	all := unfinishedUpgrades(s.cfg.Cache, "")
	// A Running run goes before the tenant's Pending ones whatever its age.
	sort.SliceStable(all, func(i, j int) bool {
		return all[i].Status.Phase == domain.UpgradeRunning && all[j].Status.Phase != domain.UpgradeRunning
	})
	for _, u := range all {
		t := u.Metadata.Tenant
		if seen[t] || running[t] {
			continue
		}
		seen[t] = true
		if nb, ok := notBefore[t]; ok && now.Before(nb) {
			continue
		}
		if busy >= s.cfg.Concurrency {
			break
		}
		delete(notBefore, t)
		busy++
		out = append(out, u)
	}
	return out
}
