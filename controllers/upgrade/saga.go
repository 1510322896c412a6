package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Lease makes one replica at a time run the upgrade saga.
const Lease = "upgrade-saga"

// Consumer is the saga's durable consumer of tenant, node group and
// upgrade events. Renaming it loses the events not yet handled: a new
// consumer starts after the read model it remembers the versions from.
const Consumer = "upgrade-saga"

// Actor is the actor of the saga's own writes.
const Actor = "system:upgrade-saga"

// Queue holds the tenants with an upgrade to start, resume or steer
// (the controller runtime's queue of the saga).
const Queue = "rezus-upgrade-queue"

// ConfigSource renders a tenant's machine configs (a *talos.Service): the
// Kubernetes run renders each machine's next and previous config through it,
// as the day-2 config controller does, so both agree byte for byte.
type ConfigSource interface {
	Desired(ctx context.Context, tenant string) (*talos.Desired, error)
}

// BundleSource gives a tenant's secrets bundle.
type BundleSource interface {
	Bundle(ctx context.Context, tenant string) (*secrets.Bundle, error)
}

// Observer probes a tenant's machines through the Talos API and records
// what it saw on them (a *health.Service of talos/health): the machines'
// stage, readiness, version and lastSeen are its to write
// (domain.StatusOwners), so the saga asks it rather than writing them.
type Observer interface {
	Probe(ctx context.Context, tenant string, refresh bool) (domain.TenantHealth, error)
}

// Config configures the saga. Store, Cache, Bundles and Holder are
// required; every other field has the default its comment gives.
type Config struct {
	Store *eventstore.Store
	Cache *projections.Cache
	// Bundles gives each tenant's PKI (a *talos.PKI).
	Bundles BundleSource
	// Configs renders machine configs for Kubernetes runs (a *talos.Service);
	// without it a Kubernetes run fails before it touches a machine.
	Configs ConfigSource
	// Rotations moves tenants' PKI through rotations (a *talos.PKI);
	// without it a rotation run fails before it touches a machine.
	Rotations Rotator
	// Holder names this replica in the saga's lease and in the status.replica
	// of each machine step it carries on.
	Holder string
	// Tenants, when set, shares the tenants' runs out over the replicas:
	// this replica runs only the tenants it holds (controller.Tenants); nil:
	// the lease holder runs every tenant.
	Tenants *controller.Tenants
	// Observer, when set, is asked to probe the tenant after each step that
	// changed a node (back on the target, done, rolled back, failed), so
	// the machines' status follows the run rather than the next health
	// request. Nil: nothing is asked; the Upgrade's status is the record.
	Observer Observer
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Endpoint is the Talos API (host:port) of a machine; default its
	// spec.address on port 50000.
	Endpoint func(m *domain.Machine) (string, error)
	// ImageFactory is the Image Factory URL installers come from for node
	// groups whose providerConfig names no installImage (one that does is
	// used with the version as its tag); default the public one.
	ImageFactory string
	// Schematics registers a group's schematic with that factory before a
	// machine installs it; nil: it is not.
	Schematics SchematicRegistrar
	// CallTimeout bounds one Talos API call; default 10s.
	CallTimeout time.Duration
	// PollInterval is the longest pause between two looks at a node while
	// the saga waits for it; a wait looks sooner at first (pollDelay: an
	// eighth of the time waited, at least 250ms); default 2s.
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
	// Kube reaches tenants' Kubernetes APIs (a *kubeclient.Clients) to
	// cordon and drain each machine before it reboots; nil: machines are
	// not drained (tests of the light emulator, which has no Kubernetes).
	Kube KubeSource
	// DrainSkip says why a node group's machines are not drained although
	// the group asks for it ("" when they are): serve skips the emulated
	// provider's groups when the emulator runs without Kubernetes.
	DrainSkip func(ng *domain.NodeGroup) string
	// DrainPoll is how often a drain looks at the node's pods; default
	// drain.DefaultPoll (250ms).
	DrainPoll time.Duration
	// DialOptions are added to every connection to a node (tests count the
	// upgrade calls with an interceptor).
	DialOptions []grpc.DialOption
}

func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Endpoint == nil {
		c.Endpoint = machineEndpoint
	}
	if c.ImageFactory == "" {
		c.ImageFactory = domain.DefaultImageFactory
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

// Saga drives rolling Talos upgrades: it turns changes of a tenant's
// or node group's talosVersion into Upgrade runs, and carries out each run
// machine by machine through the Talos API, recording every step as a status
// event of the Upgrade, so that whichever replica holds the lease next
// resumes where the last one stopped. The controller runtime holds the lease
// and runs one upgrade per tenant at a time.
type Saga struct {
	cfg Config
	controller.Base
	// versions is the trigger's bucket, opened by Run.
	versions jetstream.KeyValue

	mu   sync.Mutex
	runs map[string]*upgradeRun // by tenant, while running here

	// heads holds the head of each tenant the trigger read, with the
	// read model's sequence it was decoded at: a tenant changes far less
	// often than its node groups, whose events all read it.
	headsMu sync.Mutex
	heads   map[string]tenantHeadAt
}

// New returns the saga; Run starts it.
func New(cfg Config) *Saga {
	cfg.setDefaults()
	s := &Saga{cfg: cfg, runs: map[string]*upgradeRun{}, heads: map[string]tenantHeadAt{}}
	s.Base = controller.Build(controller.Spec{
		Store: cfg.Store, Holder: cfg.Holder, Tenants: cfg.Tenants, Name: "upgrade saga",
		Lease: Lease, Consumer: Consumer, Queue: Queue, Description: "tenants with an upgrade to start or resume",
		Provision:   func(ctx context.Context) error { return s.provisionConsumer(ctx, s.versions) },
		Kinds:       eventKinds,
		Concurrency: cfg.Concurrency, Backoff: func(int) time.Duration { return cfg.RetryBackoff },
		Resync: cfg.Resync, Clock: controller.RealClock(cfg.Now), Log: cfg.Log,
		// Every tenant with an upgrade that has not finished is queued when
		// this replica leads, so that a run a previous leader left (Running)
		// or never started (Pending) goes on here, and at each resync.
		ReadModel: cfg.Cache, Pending: func(context.Context) ([]string, error) { return unfinishedTenants(s), nil },
	}, sagaController{s})
	return s
}

// ActiveUpgrade reports whether the tenant has an upgrade that holds back
// its applies: one not finished, unless it waits between machines for a
// maintenance window (domain.UpgradeStatus.HoldsBack).
func (s *Saga) ActiveUpgrade(tenant string) bool {
	for _, u := range unfinishedUpgrades(s.cfg.Cache, tenant) {
		if u.Status.HoldsBack() {
			return true
		}
	}
	return false
}

// Active names the tenant's oldest upgrade that has not finished
// (Pending or Running), if any. It reads the replicated read model, so any
// replica can ask: the apply worker holds back version-specific config while
// it reports true.
func Active(cache *projections.Cache, tenant string) (string, bool) {
	runs := unfinishedUpgrades(cache, tenant)
	if len(runs) == 0 {
		return "", false
	}
	return runs[0].Metadata.Name, true
}

// unfinishedUpgrades lists a tenant's (or, for "", every tenant's) upgrades
// that are not final, oldest first.
func unfinishedUpgrades(cache *projections.Cache, tenant string) []domain.Upgrade {
	all, err := projections.List[domain.Upgrade](cache, domain.UpgradeKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil
	}
	var out []domain.Upgrade
	for _, u := range all {
		if !u.Status.Final() {
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
func (s *Saga) Run(ctx context.Context) error {
	var kv jetstream.KeyValue
	err := eventstore.UntilClusterReady(ctx, func() error {
		var err error
		kv, err = openVersionsBucket(ctx, s.cfg.Store)
		return err
	})
	if err != nil {
		return err
	}
	s.versions = kv
	return s.Base.Run(ctx)
}

// eventKinds are the kinds whose events start, steer or trigger upgrades.
var eventKinds = []*domain.KindInfo{domain.TenantKind, domain.NodeGroupKind, domain.UpgradeKind}

// provisionConsumer creates the durable consumer the first time: the node
// groups' versions are remembered as the read model has them at a sequence,
// and the consumer delivers the events after it, so that no version change is
// missed nor taken for one. Later starts find it and go on where it was.
func (s *Saga) provisionConsumer(ctx context.Context, kv jetstream.KeyValue) error {
	js := s.cfg.Store.JetStream()
	cons, err := js.Consumer(ctx, eventstore.StreamName, Consumer)
	if err == nil {
		// One made with several filter subjects (before the runtime
		// filtered by kind) takes every event from where it is.
		if cc := cons.CachedInfo().Config; cc.FilterSubject != controller.AllEvents {
			cc.FilterSubject, cc.FilterSubjects = controller.AllEvents, nil
			if _, err := js.UpdateConsumer(ctx, eventstore.StreamName, cc); err != nil {
				return fmt.Errorf("updating consumer %s: %w", Consumer, err)
			}
		}
		return nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("looking up consumer %s: %w", Consumer, err)
	}
	if err := s.cfg.Cache.Sync(ctx); err != nil {
		return err
	}
	seq := s.cfg.Cache.Seq()
	if err := s.rememberVersions(ctx, kv); err != nil {
		return err
	}
	_, err = js.CreateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{
		Durable: Consumer, Description: "starts and steers Talos upgrade runs",
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq + 1, AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: controller.AllEvents, AckWait: 30 * time.Second, MaxAckPending: 256,
	})
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("provisioning consumer %s: %w", Consumer, err)
	}
	return nil
}
