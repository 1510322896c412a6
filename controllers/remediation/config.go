package remediation

import (
	"context"
	"log/slog"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Lease makes one replica at a time run the remediation controller.
const Lease = "remediation"

// Consumer is the controller's durable consumer of node group and
// remediation events; it delivers new events only (a new leader queues the
// tenants with remediation itself), so renaming it loses nothing.
const Consumer = "remediation"

// Queue holds the tenants whose machines are watched.
const Queue = "rezus-remediation-queue"

// Actor is the actor of the controller's own writes.
const Actor = "system:remediation"

// Prober probes a tenant's machines and writes what it saw to their
// statuses (health.Service).
type Prober interface {
	Probe(ctx context.Context, tenant string, refresh bool) (domain.TenantHealth, error)
}

// Config configures the controller. Store, Cache, Prober and Holder are
// required; every other field has the default its comment gives.
type Config struct {
	Store  *eventstore.Store
	Cache  *projections.Cache
	Prober Prober
	// Holder names this replica in the controller's lease and in the
	// Remediations' status.replica.
	Holder string
	// Tenants, when set, shares the tenants' runs out over the replicas:
	// this replica runs only the tenants it holds (controller.Tenants); nil:
	// the lease holder runs every tenant.
	Tenants *controller.Tenants
	// Interval is how often the machines of a tenant with remediation are
	// probed; default 15s (the health probe's cache TTL). A group's
	// unhealthyAfter shorter than this is still honoured to within it.
	Interval time.Duration
	// Concurrency is how many tenants are probed at once; default 4.
	Concurrency int
	// Clock defaults to the wall clock.
	Clock controller.Clock
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Validate checks the required fields.
func (c *Config) Validate() error {
	return controller.Required("remediation", controller.Need("Store", c.Store), controller.Need("Cache", c.Cache),
		controller.Need("Prober", c.Prober), controller.Need("Holder", c.Holder))
}

func (c *Config) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = 15 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Clock == nil {
		c.Clock = controller.RealClock(nil)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}
