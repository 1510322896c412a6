package configsync

import (
	"context"
	"log/slog"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Lease makes one replica at a time run the config controller.
const Lease = "config-sync"

// Consumer is the controller's durable consumer of tenant, node group,
// config patch, machine and upgrade events. Renaming it replays nothing (it
// delivers new events only; a new leader queues every tenant anyway) but
// leaves the old consumer behind.
const Consumer = "config-sync"

// Queue holds the tenants whose machine configs are to be looked at.
const Queue = "rezus-config-queue"

// Actor is the actor of the controller's own writes: its events queue nothing.
const Actor = "system:config-sync"

// Nodes is what the controller needs of the Talos API (talos.NodeAPI).
type Nodes interface {
	// ApplyConfig applies a config over mTLS in mode AUTO (maintenance false)
	// and says which mode Talos chose.
	ApplyConfig(ctx context.Context, b *secrets.Bundle, address string, cfg []byte, maintenance bool) (talos.ApplyResult, error)
	// ApplyConfigDryRun says how a node would take a config (mode AUTO):
	// whether it would reboot.
	ApplyConfigDryRun(ctx context.Context, b *secrets.Bundle, address string, cfg []byte) (talos.ApplyResult, error)
	// Ready says whether the node answers with its services healthy.
	Ready(ctx context.Context, b *secrets.Bundle, address string) (problem string, err error)
}

// Config configures the controller. Store, Cache, Talos and Holder are
// required; every other field has the default its comment gives.
type Config struct {
	Store *eventstore.Store
	Cache *projections.Cache
	// Talos renders the machines' configs (Service.Desired) and gives the
	// tenants' PKI.
	Talos *talos.Service
	// Holder names this replica in the controller's lease.
	Holder string
	// Tenants, when set, shares the tenants' runs out over the replicas:
	// this replica runs only the tenants it holds (controller.Tenants); nil:
	// the lease holder runs every tenant.
	Tenants *controller.Tenants
	// Nodes reaches the machines; default talos.NodeAPI{Timeout: CallTimeout}.
	Nodes Nodes
	// Log defaults to slog.Default().
	Log *slog.Logger
	// CallTimeout bounds one Talos API call; default 10s.
	CallTimeout time.Duration
	// Debounce is the quiet time after a change before a tenant is looked
	// at, so that a burst (a tofu run creating machines) is one pass; default 200ms.
	Debounce time.Duration
	// Concurrency is how many tenants are reconciled at once; default 4.
	Concurrency int
	// BackoffBase and BackoffMax shape the retries of a tenant with a machine
	// that did not take its config (exponential, jittered); default 2s and
	// 30s, so a node that comes back is retried within half a minute.
	BackoffBase, BackoffMax time.Duration
	// PollInterval is how often a rebooting control plane is asked whether it
	// is back; default 1s.
	PollInterval time.Duration
	// RebootDownWait is how long, after a config that needs a reboot, the
	// controller waits to see a control plane go down before it waits for it
	// to be back (a reboot faster than one poll is not seen); default 10s.
	RebootDownWait time.Duration
	// RebootTimeout is how long a machine may take to be back with its
	// services healthy after a reboot apply (counted from the apply, and
	// kept across restarts: status.configWait), before the rollout of the
	// other control planes stops (and is retried); then as long again for
	// a drained machine's Node to be Ready before it is uncordoned; default 10m.
	RebootTimeout time.Duration
	// Kube reaches the tenants' Kubernetes APIs (a *kubeclient.Clients): a
	// config that would reboot a machine (a dry run says so) is applied only
	// after its Node is drained, and the Node is uncordoned once it is back
	// Ready. Without it nothing is drained.
	Kube KubeSource
	// DrainSkip says why a node group's machines run no Kubernetes to drain
	// ("" when they do); nil: every group's machines do.
	DrainSkip func(*domain.NodeGroup) string
	// DrainPoll is the pause between two looks at a draining node; default
	// drain.DefaultPoll (250ms).
	DrainPoll time.Duration
	// Now is the clock of recorded times; default time.Now.
	Now func() time.Time
	// Clock times the debounce and the backoffs; default the wall clock with Now.
	Clock controller.Clock
}

// Validate checks the required fields.
func (c *Config) Validate() error {
	return controller.Required("configsync", controller.Need("Store", c.Store), controller.Need("Cache", c.Cache), controller.Need("Talos", c.Talos), controller.Need("Holder", c.Holder))
}

func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.Nodes == nil {
		c.Nodes = talos.NodeAPI{Timeout: c.CallTimeout}
	}
	if c.Debounce == 0 {
		c.Debounce = 200 * time.Millisecond
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 2 * time.Second
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.RebootDownWait == 0 {
		c.RebootDownWait = 10 * time.Second
	}
	if c.RebootTimeout == 0 {
		c.RebootTimeout = 10 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Clock == nil {
		c.Clock = controller.RealClock(c.Now)
	}
}
