package rollout

import (
	"context"
	"log/slog"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Lease makes one replica at a time run the rollout controller.
const Lease = "rollout"

// Consumer is the controller's durable consumer of rollout, upgrade and
// config patch events; it delivers new events only (a new leader queues the
// rollouts that are not over itself), so renaming it loses nothing.
const Consumer = "rollout"

// Queue holds the rollouts under way.
const Queue = "rezus-rollout-queue"

// Actor is the actor of the controller's writes.
const Actor = "system:rollout"

// Prober probes a tenant's machines (health.Service).
type Prober interface {
	Probe(ctx context.Context, tenant string, refresh bool) (domain.TenantHealth, error)
}

// ConfigProgress says which of a tenant's machines do not hold their
// rendered config yet (talos.Service).
type ConfigProgress interface {
	ConfigProgress(ctx context.Context, tenant string, since time.Time) (talos.ConfigProgress, error)
}

// Config configures the controller. Store, Cache, Prober, Configs and
// Holder are required; every other field has the default its comment gives.
type Config struct {
	Store   *eventstore.Store
	Cache   *projections.Cache
	Prober  Prober
	Configs ConfigProgress
	// Holder names this replica in the controller's lease.
	Holder string
	// Interval is how often a rollout under way is looked at again when no
	// event moves it (a tenant's health, a config taken); default 5s.
	Interval time.Duration
	// Concurrency is how many rollouts are worked on at once; default 2.
	Concurrency int
	// Probes is how many tenants are probed at once; default 8.
	Probes int
	// Clock defaults to the wall clock.
	Clock controller.Clock
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Validate checks the required fields.
func (c *Config) Validate() error {
	return controller.Required("rollout", controller.Need("Store", c.Store), controller.Need("Cache", c.Cache), controller.Need("Prober", c.Prober), controller.Need("Configs", c.Configs), controller.Need("Holder", c.Holder))
}

func (c *Config) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 2
	}
	if c.Probes <= 0 {
		c.Probes = 8
	}
	if c.Clock == nil {
		c.Clock = controller.RealClock(nil)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}
