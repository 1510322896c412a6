package tfrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"golang.org/x/sync/errgroup"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// WorkerLease makes one replica at a time run applies.
const WorkerLease = "apply-worker"

// InfraFinalizer holds a tenant whose infrastructure may exist until `tofu
// destroy` has removed it.
const InfraFinalizer = "rezuscloud.io/infrastructure"

// cancelSubject is where cancel requests for runs go (request/reply); the
// replica holding the worker lease answers.
const cancelSubject = "rezus.applyctl.cancel"

// Bundles gives a tenant's PKI (talos.PKI).
type Bundles interface {
	Bundle(ctx context.Context, tenant string) (*secrets.Bundle, error)
}

// StateCredentials issues per-apply credentials for the HTTP state backend
// that reach only the tenant's state.
type StateCredentials interface {
	IssueStateCredentials(tenant, applyID string, ttl time.Duration) (username, password string, err error)
}

// ProviderCredentials gives the environment of a Provider's credentialsRef.
type ProviderCredentials interface {
	ProviderCredentials(ctx context.Context, name string) (map[string]string, error)
}

// UpgradeGate says whether a tenant is being upgraded (talos.UpgradeSaga).
type UpgradeGate interface {
	ActiveUpgrade(tenant string) bool
}

// StateStore is what the worker needs of the TF state storage.
type StateStore interface {
	// LockHolderApply is the apply whose credentials hold the tenant's state
	// lock ("" when it is not locked).
	LockHolderApply(ctx context.Context, tenant string) (string, error)
	// ForceUnlock drops the tenant's state lock.
	ForceUnlock(ctx context.Context, tenant string) error
	// DeleteState removes the tenant's state and its history.
	DeleteState(ctx context.Context, tenant string) error
	// HasState reports whether the tenant has a state.
	HasState(ctx context.Context, tenant string) (bool, error)
}

// Config configures a Worker. Fields without a default are required.
type Config struct {
	Store   *eventstore.Store
	Cache   *projections.Cache
	Bundles Bundles
	Logs    *Logs
	Tofu    Tofu
	// WorkDir holds one directory per tenant and the shared plugin cache.
	WorkDir string
	// BackendURL is this server's base URL as tofu reaches it, e.g. http://127.0.0.1:8080.
	BackendURL string
	// BackendCAPEM is the CA that signs the server's certificate (https only).
	BackendCAPEM string
	Credentials  StateCredentials
	// ProviderCredentials may be nil when no Provider has a credentialsRef.
	ProviderCredentials ProviderCredentials
	State               StateStore
	// Upgrades, when set, holds back a tenant's applies while a rolling
	// upgrade of it runs, so version-specific configs are not regenerated
	// under the saga's feet.
	Upgrades UpgradeGate
	// Metal drives machines through the Talos API: metal node groups and the
	// bootstrap of etcd on every tenant's first control plane. Nil leaves both out.
	Metal Metal
	// BootstrapWait bounds how long a run waits for the first control plane
	// to come up before bootstrapping etcd; default 5m.
	BootstrapWait time.Duration
	// StatePassphrase, when set, encrypts state through TF_ENCRYPTION.
	StatePassphrase string
	// Holder names this replica in leases and applies.
	Holder string
	Log    *slog.Logger

	// Debounce is the quiet time after a change before an apply; default 2s.
	Debounce time.Duration
	// MaxDelay bounds how long changes that keep coming delay an apply; default 30s.
	MaxDelay time.Duration
	// Concurrency is how many tenants apply at once; default 4.
	Concurrency int
	// Timeout bounds one run; default 30m.
	Timeout time.Duration
	// Resync queues every tenant this often, to catch drift; default 10m, <0 off.
	Resync time.Duration
	// BackoffBase and BackoffMax shape retries of failed runs; default 5s and 5m.
	BackoffBase, BackoffMax time.Duration
	// KeepApplies is how many finished applies (with logs) a tenant keeps; default 20.
	KeepApplies int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Debounce == 0 {
		c.Debounce = 2 * time.Second
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 30 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.Resync == 0 {
		c.Resync = 10 * time.Minute
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 5 * time.Second
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 5 * time.Minute
	}
	if c.BootstrapWait == 0 {
		c.BootstrapWait = 5 * time.Minute
	}
	if c.KeepApplies == 0 {
		c.KeepApplies = 20
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Worker is the apply worker: it queues tenants on tenant-affecting events and
// runs tofu for them, debounced, serial per tenant and parallel across tenants.
type Worker struct {
	cfg Config

	// initMu serialises `tofu init`, which shares the plugin cache.
	initMu sync.Mutex

	mu      sync.Mutex
	running map[string]*activeRun // by tenant
	leading bool
	// applies counts runs started by this process (for tests and metrics).
	applies int
}

type activeRun struct {
	apply    string
	cancel   context.CancelCauseFunc
	canceled bool
	// deferred runs did nothing and are tried again later without counting as a failure.
	deferred bool
}

// errCanceledByUser is the cause of a run's context when a user cancels it.
var errCanceledByUser = errors.New("canceled by a user")

// NewWorker returns a worker; Run starts it.
func NewWorker(cfg Config) *Worker {
	cfg.setDefaults()
	return &Worker{cfg: cfg, running: map[string]*activeRun{}}
}

// Leading reports whether this replica holds the worker lease.
func (w *Worker) Leading() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leading
}

// Started is how many runs this process started.
func (w *Worker) Started() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applies
}

// Run provisions the queue and the consumer and works while this replica holds
// the worker lease, until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	kv, err := openQueue(ctx, w.cfg.Store)
	if err != nil {
		return err
	}
	if _, err := w.cfg.Store.JetStream().CreateOrUpdateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{
		Durable: WorkerConsumer, Description: "queues tenants for the apply worker",
		DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubjects: tenantEventSubjects(), AckWait: 15 * time.Second, MaxAckPending: 256,
	}); err != nil {
		return fmt.Errorf("provisioning consumer %s: %w", WorkerConsumer, err)
	}
	leases, err := eventstore.OpenLeases(ctx, w.cfg.Store, eventstore.LeaseTTL)
	if err != nil {
		return err
	}
	return leases.RunWhileHeld(ctx, WorkerLease, w.cfg.Holder, func(ctx context.Context) error {
		return w.lead(ctx, kv)
	})
}

func (w *Worker) lead(ctx context.Context, kv jetstream.KeyValue) error {
	w.setLeading(true)
	defer w.setLeading(false)
	if err := w.cfg.Cache.Sync(ctx); err != nil {
		return err
	}
	w.cfg.Log.Info("apply worker leading", "holder", w.cfg.Holder)
	if err := w.recover(ctx, kv); err != nil {
		return err
	}
	sub, err := w.cfg.Store.Conn().Subscribe(cancelSubject+".>", w.onCancel)
	if err != nil {
		return fmt.Errorf("apply worker: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.consume(gctx, kv) })
	g.Go(func() error { return w.schedule(gctx, kv) })
	if w.cfg.Resync > 0 {
		g.Go(func() error { return w.resync(gctx, kv) })
	}
	return g.Wait()
}

func (w *Worker) setLeading(v bool) {
	w.mu.Lock()
	w.leading = v
	w.mu.Unlock()
}

// recover finishes what a previous holder left: runs it recorded as going are
// marked failed (their process is gone) and their tenants queued again.
func (w *Worker) recover(ctx context.Context, kv jetstream.KeyValue) error {
	res, err := w.cfg.Cache.List(domain.ApplyKind.Kind, projections.ListOptions{})
	if err != nil {
		return err
	}
	for _, raw := range res.Items {
		var a domain.Apply
		if err := json.Unmarshal(raw, &a); err != nil || a.Status.Final() {
			continue
		}
		tenant := a.Metadata.Tenant
		w.cfg.Log.Warn("apply interrupted by a restart; queueing the tenant again", "tenant", tenant, "apply", a.Metadata.Name)
		note := "\n[rezuscloud] the server running this apply stopped; it will be retried\n"
		if err := w.cfg.Logs.MarkEnded(ctx, tenant, a.Metadata.Name, note); err != nil {
			w.cfg.Log.Warn("ending an interrupted apply's log", "tenant", tenant, "apply", a.Metadata.Name, "err", err)
		}
		now := w.cfg.Now().UTC()
		st := a.Status
		st.Phase, st.EndTime, st.Error = domain.ApplyFailed, &now, "interrupted: the server running it stopped"
		w.writeApplyStatus(ctx, tenant, a.Metadata.Name, st)
		if err := enqueue(ctx, kv, tenant, "Apply/"+a.Metadata.Name+"@interrupted", w.cfg.Now()); err != nil {
			return err
		}
	}
	return nil
}

// consume turns tenant-affecting events into queue entries.
func (w *Worker) consume(ctx context.Context, kv jetstream.KeyValue) error {
	return w.cfg.Store.ConsumeDurable(ctx, WorkerConsumer, w.cfg.Log, func(ctx context.Context, msg jetstream.Msg) error {
		return w.handleEvent(ctx, kv, msg)
	})
}

func (w *Worker) handleEvent(ctx context.Context, kv jetstream.KeyValue, msg jetstream.Msg) error {
	ev := &domain.Event{}
	if err := json.Unmarshal(msg.Data(), ev); err != nil || ev.Object == nil {
		return nil
	}
	if ev.Actor == WorkerActor || strings.HasSuffix(ev.Type, "StatusUpdated") {
		return nil
	}
	md, err := msg.Metadata()
	if err != nil {
		return err
	}
	source := fmt.Sprintf("%s/%s@%d", ev.Object.Kind, ev.Object.Metadata.Name, md.Sequence.Stream)
	for _, t := range w.affected(ev) {
		if err := enqueue(ctx, kv, t, source, w.cfg.Now()); err != nil {
			return err
		}
	}
	return nil
}

// affected lists the tenants an event may change the infrastructure of.
func (w *Worker) affected(ev *domain.Event) []string {
	o := ev.Object
	switch o.Kind {
	case domain.TenantKind.Kind:
		return []string{o.Metadata.Name}
	case domain.NodeGroupKind.Kind, domain.ConfigPatchKind.Kind:
		return []string{o.Metadata.Tenant}
	case domain.ProviderKind.Kind:
		res, err := w.cfg.Cache.List(domain.NodeGroupKind.Kind, projections.ListOptions{})
		if err != nil {
			return nil
		}
		seen := map[string]bool{}
		var out []string
		for _, raw := range res.Items {
			var ng domain.NodeGroup
			if json.Unmarshal(raw, &ng) == nil && ng.Spec.Provider == o.Metadata.Name && !seen[ng.Metadata.Tenant] {
				seen[ng.Metadata.Tenant] = true
				out = append(out, ng.Metadata.Tenant)
			}
		}
		return out
	}
	return nil
}

// resync queues every tenant periodically, so drift (and a failed destroy) is retried.
func (w *Worker) resync(ctx context.Context, kv jetstream.KeyValue) error {
	t := time.NewTicker(w.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		res, err := w.cfg.Cache.List(domain.TenantKind.Kind, projections.ListOptions{})
		if err != nil {
			continue
		}
		for _, raw := range res.Items {
			var o domain.Object
			if json.Unmarshal(raw, &o) == nil {
				if err := enqueue(ctx, kv, o.Metadata.Name, "resync", w.cfg.Now()); err != nil && ctx.Err() == nil {
					w.cfg.Log.Warn("apply worker: resync", "tenant", o.Metadata.Name, "err", err)
				}
			}
		}
	}
}

type pending struct {
	rev   uint64
	entry queueEntry
}

type result struct {
	tenant   string
	rev      uint64
	ok       bool
	canceled bool
	deferred bool
}

// schedule starts runs for queued tenants once their changes have settled.
func (w *Worker) schedule(ctx context.Context, kv jetstream.KeyValue) error {
	watch, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("apply worker: watching the queue: %w", err)
	}
	defer func() { _ = watch.Stop() }()
	queue := map[string]pending{}
	attempts := map[string]int{}
	notBefore := map[string]time.Time{}
	results := make(chan result)
	var runs sync.WaitGroup
	defer runs.Wait()
	// Runs end with the scheduler, whatever ends it.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	running := 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Start what is due, oldest first, up to the concurrency.
		now := w.cfg.Now()
		next := time.Time{}
		var due []string
		for t, p := range queue {
			if w.isRunning(t) {
				continue
			}
			at := p.entry.Last.Add(w.cfg.Debounce)
			if cap := p.entry.First.Add(w.cfg.MaxDelay); cap.Before(at) {
				at = cap
			}
			if nb := notBefore[t]; nb.After(at) {
				at = nb
			}
			if !at.After(now) {
				due = append(due, t)
			} else if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		sort.Slice(due, func(i, j int) bool { return queue[due[i]].entry.First.Before(queue[due[j]].entry.First) })
		for _, t := range due {
			if running >= w.cfg.Concurrency {
				break
			}
			p := queue[t]
			running++
			runs.Add(1)
			rctx, cancel := context.WithCancelCause(ctx)
			run := &activeRun{cancel: cancel}
			w.mu.Lock()
			w.running[t] = run
			w.applies++
			w.mu.Unlock()
			go func(t string, p pending, attempt int) {
				defer runs.Done()
				defer cancel(nil)
				ok := w.runTenant(rctx, t, p.entry, attempt, run)
				w.mu.Lock()
				canceled, deferred := run.canceled, run.deferred
				delete(w.running, t)
				w.mu.Unlock()
				select {
				case results <- result{tenant: t, rev: p.rev, ok: ok, canceled: canceled, deferred: deferred}:
				case <-ctx.Done():
				}
			}(t, p, attempts[t]+1)
		}
		if next.IsZero() {
			timer.Reset(time.Hour)
		} else {
			timer.Reset(max(next.Sub(now), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case e, ok := <-watch.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				delete(queue, e.Key())
				continue
			}
			var entry queueEntry
			if json.Unmarshal(e.Value(), &entry) == nil {
				queue[e.Key()] = pending{rev: e.Revision(), entry: entry}
			}
		case r := <-results:
			running--
			if r.ok || r.canceled {
				delete(attempts, r.tenant)
				delete(notBefore, r.tenant)
				// Done with what was queued when it started; a change since
				// then changed the revision and stays queued as a follow-up.
				err := kv.Delete(ctx, r.tenant, jetstream.LastRevision(r.rev))
				switch {
				case err == nil:
					// The watch reports the deletion later; until then the
					// entry must not look due again.
					if p, ok := queue[r.tenant]; ok && p.rev == r.rev {
						delete(queue, r.tenant)
					}
				case errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err):
					// Changed during the run: stays queued as the follow-up.
				case ctx.Err() == nil:
					w.cfg.Log.Warn("apply worker: dequeuing", "tenant", r.tenant, "err", err)
				}
				continue
			}
			if r.deferred {
				notBefore[r.tenant] = w.cfg.Now().Add(deferRetry)
				continue
			}
			attempts[r.tenant]++
			notBefore[r.tenant] = w.cfg.Now().Add(w.backoff(attempts[r.tenant]))
		}
	}
}

// deferRetry is how soon a deferred tenant (upgrade running) is looked at again.
const deferRetry = 10 * time.Second

// backoff is the wait before retry n (1-based): exponential, capped, jittered.
func (w *Worker) backoff(n int) time.Duration {
	d := w.cfg.BackoffBase
	for i := 1; i < n && d < w.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, w.cfg.BackoffMax)
	return d/2 + rand.N(d/2+1)
}

func (w *Worker) isRunning(tenant string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.running[tenant]
	return ok
}

// runningApply is the apply a tenant's current run records ("" when none).
func (w *Worker) runningApply(tenant string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.running[tenant]; ok {
		return r.apply
	}
	return ""
}

func (w *Worker) onCancel(m *nats.Msg) {
	parts := strings.Split(strings.TrimPrefix(m.Subject, cancelSubject+"."), ".")
	answer := func(s string) { _ = m.Respond([]byte(s)) }
	if len(parts) != 2 {
		answer("bad request")
		return
	}
	w.mu.Lock()
	r, ok := w.running[parts[0]]
	if ok && r.apply == parts[1] {
		r.canceled = true
		r.cancel(errCanceledByUser)
	}
	w.mu.Unlock()
	if ok && r.apply == parts[1] {
		answer("canceled")
		return
	}
	answer("not running")
}

// ErrNotRunning says the apply to cancel is not running.
var ErrNotRunning = errors.New("the apply is not running")

// Cancel asks the replica running applies to stop tenant's run apply; the run
// is interrupted as a user would interrupt tofu (it releases its lock) and
// recorded as Canceled.
func Cancel(ctx context.Context, nc *nats.Conn, tenant, apply string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := nc.RequestWithContext(ctx, cancelSubject+"."+tenant+"."+apply, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w: no replica is running applies", ErrNotRunning)
	}
	if err != nil {
		return err
	}
	if string(resp.Data) != "canceled" {
		return ErrNotRunning
	}
	return nil
}

// Tofu is the tofu the worker runs.
func (w *Worker) Tofu() Tofu { return w.cfg.Tofu }
