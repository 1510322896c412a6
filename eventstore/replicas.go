package eventstore

// Replica heartbeats: who runs on this data, which release and which
// storage schema level, so that writers write the level every running
// replica reads (docs/storage.md).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// ReplicasBucket holds one heartbeat per running replica, by holder. Its
// entries expire (the bucket's TTL) when a replica stops beating.
const ReplicasBucket = "rezus-replicas"

// DefaultHeartbeatInterval is how often a replica beats unless configured.
const DefaultHeartbeatInterval = 5 * time.Second

// Replica is one replica's heartbeat, the value of its key in ReplicasBucket.
type Replica struct {
	// Holder names the replica (host-pid), as its leases do.
	Holder string `json:"holder"`
	// Version is the release it runs, e.g. "0.2.0".
	Version string `json:"version"`
	// SchemaLevel is the newest storage schema level it reads.
	SchemaLevel int `json:"schemaLevel"`
	// NATSServer is the name of the NATS node it embeds; "" with an
	// external NATS.
	NATSServer string `json:"natsServer,omitempty"`
	// StartedAt is when it started; Seen when it last beat.
	StartedAt time.Time `json:"startedAt"`
	Seen      time.Time `json:"seen"`
	// ID names this run of the replica (a new one at each start), so a
	// replica restarted under the same holder is a new member: tenants
	// claimed by the old run are not the new one's (controller.Tenants).
	// Absent from builds before tenant sharing (0.2.0): a replica without
	// it makes the others run tenants by their controllers' leases only.
	ID string `json:"id,omitempty"`
	// Tenants is how many tenants it works (controller.Tenants); 0 from
	// builds before tenant sharing.
	Tenants int `json:"tenants"`
}

// ReplicasConfig configures the heartbeats. Holder and Release are required.
type ReplicasConfig struct {
	// Holder names this replica (its key).
	Holder string
	// Release is the release this replica runs.
	Release string
	// NATSServer is the name of the NATS node this replica embeds; "" with
	// an external NATS.
	NATSServer string
	// Peers, when set, names the NATS servers this replica's node is
	// connected to now (Embedded.PeerNames): a peer that no heartbeat
	// names runs a release before heartbeats (0.1.0), which reads level 1
	// only. Nil with an external NATS, whose servers are not replicas.
	Peers func() []string
	// WriteLevel, when set (1..domain.SchemaLevel), caps the level written
	// (--write-schema-level): for an external NATS, where a replica of a
	// release before heartbeats cannot be seen. 0: from the heartbeats.
	WriteLevel int
	// Interval is how often to beat; default DefaultHeartbeatInterval. A
	// heartbeat expires after three intervals.
	Interval time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Tenants, when set, says how many tenants this replica works, for its
	// heartbeat.
	Tenants func() int
}

// Validate checks the fields.
func (c *ReplicasConfig) Validate() error {
	if c.Holder == "" || c.Release == "" {
		return errors.New("replicas: Holder and Release are required")
	}
	if c.WriteLevel != 0 && (c.WriteLevel < domain.MinSchemaLevel || c.WriteLevel > domain.SchemaLevel) {
		return fmt.Errorf("the write schema level %d must be between %d and %d", c.WriteLevel, domain.MinSchemaLevel, domain.SchemaLevel)
	}
	return nil
}

func (c *ReplicasConfig) setDefaults() {
	if c.Interval == 0 {
		c.Interval = DefaultHeartbeatInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ReplicaView is what the heartbeats say, as of the last read.
type ReplicaView struct {
	// Replicas are the live heartbeats, by holder.
	Replicas []Replica `json:"replicas"`
	// UnknownPeers are NATS nodes of the cluster no heartbeat names,
	// counted as level 1.
	UnknownPeers []string `json:"unknownPeers,omitempty"`
	// ClusterLevel is the lowest level every running replica reads.
	ClusterLevel int `json:"clusterSchemaLevel"`
	// WriteLevel is the level this replica writes: ClusterLevel, capped
	// by the operator's --write-schema-level.
	WriteLevel int `json:"writeSchemaLevel"`
}

// Replicas beats for this replica and keeps the cluster's schema level
// from everyone's beats. It is the store's SchemaLevels: WriteLevel is a
// cached value, read on every append and changed only by Run.
type Replicas struct {
	cfg     ReplicasConfig
	started time.Time
	store   *Store
	kv      jetstream.KeyValue
	level   atomic.Int64
	view    atomic.Pointer[ReplicaView]
	id      string
	// lastBeat is when the last heartbeat that was stored was sent (unix
	// nanoseconds): the heartbeat outlives it by the bucket's TTL at most.
	lastBeat atomic.Int64
	// changed is signalled after every read of the heartbeats.
	changed chan struct{}
	// beatSeen is, for each NATS node, when a heartbeat last named it
	// and whose it was (beat's goroutine only).
	beatSeen map[string]seenBeat
}

// seenBeat is when a NATS node's replica was last seen beating.
type seenBeat struct {
	at     time.Time
	holder string
}

// NewReplicas returns the heartbeats of this replica. Until Start has
// read the others, it writes level 1: what every release reads.
func NewReplicas(cfg ReplicasConfig) (*Replicas, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	r := &Replicas{cfg: cfg, started: cfg.Now().UTC(), id: uuid.NewString(), changed: make(chan struct{}, 1), beatSeen: map[string]seenBeat{}}
	r.level.Store(domain.MinSchemaLevel)
	r.view.Store(&ReplicaView{ClusterLevel: domain.MinSchemaLevel, WriteLevel: domain.MinSchemaLevel})
	return r, nil
}

// WriteLevel is the level appends are written at.
func (r *Replicas) WriteLevel() int { return int(r.level.Load()) }

// View is what the heartbeats said at the last read.
func (r *Replicas) View() ReplicaView { return *r.view.Load() }

// Holder names this replica.
func (r *Replicas) Holder() string { return r.cfg.Holder }

// ID names this run of the replica (Replica.ID).
func (r *Replicas) ID() string { return r.id }

// TTL is how long a heartbeat outlives the replica's last one.
func (r *Replicas) TTL() time.Duration { return 3 * r.cfg.Interval }

// Interval is how often the replica beats.
func (r *Replicas) Interval() time.Duration { return r.cfg.Interval }

// LastBeat is when the last heartbeat that was stored was sent; zero
// before the first. The heartbeat is gone from the bucket at most TTL
// after it, and another replica may then take this one's tenants.
func (r *Replicas) LastBeat() time.Time {
	n := r.lastBeat.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Alive reports whether the replica holder, in its run id, beats now: a
// read of its heartbeat, not of the last view, so a replica that started
// after this one's last read is not taken for gone.
func (r *Replicas) Alive(ctx context.Context, holder, id string) (bool, error) {
	b, found, err := r.get(ctx, holder)
	if err != nil {
		return false, fmt.Errorf("reading the heartbeat of %s: %w", holder, err)
	}
	return found && b.ID == id, nil
}

// get reads one heartbeat from the bucket's stream leader. A KV get is a
// direct get any follower answers: a lagging one, under load, answered
// with a copy in which live replicas' beats had expired, which made them
// look gone (CI: the tenants of every replica handed back and forth
// every few seconds while one replica was cut off).
func (r *Replicas) get(ctx context.Context, key string) (Replica, bool, error) {
	m, err := leaderLastMsg(ctx, r.store.nc, "KV_"+ReplicasBucket, "$KV."+ReplicasBucket+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Replica{}, false, nil
	}
	if err != nil {
		return Replica{}, false, err
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return Replica{}, false, nil
	}
	var b Replica
	if err := json.Unmarshal(m.Data, &b); err != nil || b.Holder == "" {
		// Counted as the lowest level: whoever wrote it, this build
		// cannot tell what it reads.
		b = Replica{Holder: key, Version: "unknown", SchemaLevel: domain.MinSchemaLevel}
	}
	return b, true, nil
}

// Changed is signalled after each read of the heartbeats (a view that may
// have changed); one signal may stand for several reads.
func (r *Replicas) Changed() <-chan struct{} { return r.changed }

// Start provisions the bucket, beats once and reads everyone's beats, so
// the store writes the right level from its first append. Idempotent.
func (r *Replicas) Start(ctx context.Context, store *Store) error {
	kv, err := store.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      ReplicasBucket,
		Description: "RezusCloud replicas' heartbeats: release and schema level",
		History:     1,
		TTL:         3 * r.cfg.Interval,
		Storage:     jetstream.MemoryStorage,
		Replicas:    store.Replicas(),
	})
	if err != nil {
		return fmt.Errorf("provisioning bucket %s: %w", ReplicasBucket, err)
	}
	r.store, r.kv = store, kv
	return r.beat(ctx)
}

// Run beats every interval until ctx ends, then takes its heartbeat out
// so the others stop counting it at once.
func (r *Replicas) Run(ctx context.Context) error {
	if r.kv == nil {
		return errors.New("replicas: Run before Start")
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	// Beat at once: the server's start may have taken longer than a beat
	// since Start's (tenant claims go stale when a beat is missed).
	if err := r.beat(ctx); err != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn("replicas: heartbeat", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = r.kv.Delete(dctx, r.cfg.Holder)
			cancel()
			return nil
		case <-t.C:
		}
		if err := r.beat(ctx); err != nil && ctx.Err() == nil {
			// The last level stays: a replica that cannot read the
			// bucket for a while goes on writing what it knew.
			r.cfg.Logger.Warn("replicas: heartbeat", "err", err)
		}
	}
}

// beat writes this replica's heartbeat and reads everyone's.
func (r *Replicas) beat(ctx context.Context) error {
	sent := time.Now()
	me := Replica{Holder: r.cfg.Holder, Version: r.cfg.Release, SchemaLevel: domain.SchemaLevel,
		NATSServer: r.cfg.NATSServer, StartedAt: r.started, Seen: r.cfg.Now().UTC(), ID: r.id}
	if r.cfg.Tenants != nil {
		me.Tenants = r.cfg.Tenants()
	}
	raw, err := json.Marshal(me)
	if err != nil {
		return err
	}
	if _, err := r.kv.Put(ctx, r.cfg.Holder, raw); err != nil {
		return fmt.Errorf("writing the heartbeat: %w", err)
	}
	r.lastBeat.Store(sent.UnixNano())
	beats, err := r.read(ctx)
	if err != nil {
		return err
	}
	var peers []string
	if r.cfg.Peers != nil {
		r.forgetStopped(ctx, beats)
		peers = r.peersWithoutGrace(r.cfg.Peers(), beats)
	}
	r.set(DecideClusterLevel(beats, peers, r.cfg.WriteLevel))
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return nil
}

func (r *Replicas) set(v ReplicaView) {
	prev := r.view.Swap(&v)
	r.level.Store(int64(v.WriteLevel))
	for _, b := range v.Replicas {
		r.store.NoteSchemaLevel(b.SchemaLevel)
	}
	if prev.WriteLevel != v.WriteLevel || !slices.Equal(prev.UnknownPeers, v.UnknownPeers) {
		r.cfg.Logger.Info("replicas: writing at schema level", "level", v.WriteLevel, "clusterLevel", v.ClusterLevel,
			"replicas", len(v.Replicas), "unknownPeers", strings.Join(v.UnknownPeers, ","))
	}
}

// read returns every live heartbeat.
func (r *Replicas) read(ctx context.Context) ([]Replica, error) {
	keys, err := r.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing heartbeats: %w", err)
	}
	var out []Replica
	for key := range keys.Keys() {
		b, found, err := r.get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("reading heartbeat %s: %w", key, err)
		}
		if found { // else expired or gone between the listing and now
			out = append(out, b)
		}
	}
	return out, nil
}

// peersWithoutGrace are the NATS peers to check against the heartbeats:
// a node whose replica was seen beating within the last TTL is left out
// (its beat may be missing from one read, or it was just cut off and its
// beat expires anyway), unless that replica stopped and took its beat out
// (forgetStopped). A node never seen beating (a replica of a release
// before heartbeats, or one not started yet) counts at once. Without the
// grace, one read missing a live replica's beat sent every replica into
// the legacy mode and back (its tenants handed over each time).
func (r *Replicas) peersWithoutGrace(peers []string, beats []Replica) []string {
	now := r.cfg.Now()
	for _, b := range beats {
		if b.NATSServer != "" {
			r.beatSeen[b.NATSServer] = seenBeat{at: now, holder: b.Holder}
		}
	}
	out := make([]string, 0, len(peers))
	for _, p := range peers {
		if seen, ok := r.beatSeen[p]; ok && now.Sub(seen.at) < r.TTL() {
			continue
		}
		out = append(out, p)
	}
	// Forget nodes long gone, so the map stays the size of the cluster.
	for p, seen := range r.beatSeen {
		if now.Sub(seen.at) > 10*r.TTL() {
			delete(r.beatSeen, p)
		}
	}
	return out
}

// forgetStopped drops the grace of the nodes whose replica is missing
// from beats because it stopped: its last record is the delete Run makes
// on the way out (a replica of another release may start on that node
// next).
func (r *Replicas) forgetStopped(ctx context.Context, beats []Replica) {
	present := map[string]bool{}
	for _, b := range beats {
		present[b.NATSServer] = true
	}
	for node, seen := range r.beatSeen {
		if present[node] {
			continue
		}
		m, err := leaderLastMsg(ctx, r.store.nc, "KV_"+ReplicasBucket, "$KV."+ReplicasBucket+"."+seen.holder)
		if err != nil {
			continue // gone (expired) or unreadable: the grace runs out on its own
		}
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			delete(r.beatSeen, node)
		}
	}
}

// DecideClusterLevel is the cluster's schema level from the heartbeats:
// the lowest level a replica reads, 1 when a peer NATS node is named by no
// heartbeat (a replica of a release before heartbeats), and the level
// written: that, capped by the operator's ceiling (0: none).
func DecideClusterLevel(beats []Replica, peers []string, ceiling int) ReplicaView {
	v := ReplicaView{ClusterLevel: domain.SchemaLevel}
	servers := map[string]bool{}
	for _, b := range beats {
		v.ClusterLevel = min(v.ClusterLevel, domain.LevelOf(b.SchemaLevel))
		if b.NATSServer != "" {
			servers[b.NATSServer] = true
		}
	}
	for _, p := range peers {
		if !servers[p] && !slices.Contains(v.UnknownPeers, p) {
			v.UnknownPeers = append(v.UnknownPeers, p)
			v.ClusterLevel = domain.MinSchemaLevel
		}
	}
	slices.Sort(v.UnknownPeers)
	v.Replicas = slices.SortedFunc(slices.Values(beats), func(a, b Replica) int { return strings.Compare(a.Holder, b.Holder) })
	v.WriteLevel = v.ClusterLevel
	if ceiling > 0 {
		v.WriteLevel = min(v.WriteLevel, ceiling)
	}
	return v
}
