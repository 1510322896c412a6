package backup

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Lease makes one replica at a time run the backup controller.
const Lease = "etcd-backup"

// Consumer is the controller's durable consumer of tenant, backup and
// restore events. It delivers new events only: a new leader queues what
// waits (Lead), so renaming it loses nothing but leaves the old one behind.
const Consumer = "etcd-backup"

// Queue holds the tenants with backup work.
const Queue = "rezus-etcd-backup-queue"

// Actor is the actor of the controller's own writes: its events queue nothing.
const Actor = "system:etcd-backup"

// Nodes is what the controller needs of the Talos API (talos.NodeAPI).
type Nodes interface {
	EtcdStatus(ctx context.Context, b *secrets.Bundle, address string) (talos.EtcdMemberStatus, error)
	EtcdMembers(ctx context.Context, b *secrets.Bundle, address string) ([]talos.EtcdMember, error)
	EtcdSnapshot(ctx context.Context, b *secrets.Bundle, address string) (io.ReadCloser, error)
	EtcdRecover(ctx context.Context, b *secrets.Bundle, address string, snapshot io.Reader) error
}

// Bundles gives a tenant's PKI (talos.PKI).
type Bundles interface {
	Bundle(ctx context.Context, tenant string) (*secrets.Bundle, error)
}

// Config configures the controller. Store, Cache, Backups, PKI and Holder
// are required; every other field has the default its comment gives.
type Config struct {
	Store   *eventstore.Store
	Cache   *projections.Cache
	Backups *eventstore.EtcdBackups
	PKI     Bundles
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
	// CallTimeout bounds one Talos API call (a snapshot and an upload are
	// bounded by nothing but the run); default 10s.
	CallTimeout time.Duration
	// Resync is how often tenants with a schedule are looked at for a
	// backup that is due; default 1m.
	Resync time.Duration
	// Concurrency is how many tenants run at once; default 2 (a snapshot
	// loads a control plane and the store).
	Concurrency int
	// BackoffBase and BackoffMax shape the retries of a failed run; default 5s and 5m.
	BackoffBase, BackoffMax time.Duration
	// PartialQuiet is how long the chunks of a backup object no object
	// names must have been quiet before the replica taking the lease purges
	// them as a put killed mid-way (puts of tenants other replicas work run
	// meanwhile); default 10m, negative 0.
	PartialQuiet time.Duration
	// JoinTimeout is how long a restore waits for the other control planes
	// to be etcd members again, and then for etcd to be healthy at the
	// snapshot's revision; default 10m. A Restore's spec.deadlines.join and
	// .check override it for that restore.
	JoinTimeout time.Duration
	// PollInterval is how often a restore asks whether they joined; default 2s.
	PollInterval time.Duration
	// Clock schedules, times and stamps everything; default the wall clock.
	Clock controller.Clock
	// TempDir is where a snapshot is copied as it streams, to read its
	// revision from the bolt database once whole (it can be anywhere in
	// it); default os.TempDir(). It needs room for one snapshot per
	// tenant running at once (Concurrency).
	TempDir string
}

// Validate checks the required fields.
func (c *Config) Validate() error {
	return controller.Required("backup", controller.Need("Store", c.Store), controller.Need("Cache", c.Cache), controller.Need("Backups", c.Backups), controller.Need("PKI", c.PKI), controller.Need("Holder", c.Holder))
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
	if c.PartialQuiet == 0 {
		c.PartialQuiet = 10 * time.Minute
	}
	if c.PartialQuiet < 0 {
		c.PartialQuiet = 0
	}
	if c.Resync == 0 {
		c.Resync = time.Minute
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 2
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 5 * time.Second
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 5 * time.Minute
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = 10 * time.Minute
	}
	if c.PollInterval == 0 {
		c.PollInterval = 2 * time.Second
	}
	if c.Clock == nil {
		c.Clock = controller.RealClock(nil)
	}
}
