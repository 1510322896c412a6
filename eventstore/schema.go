package eventstore

// Schema levels on the write path: appends are written at the level every
// running replica reads, and a record a newer release wrote is never
// rewritten here (docs/storage.md).

import (
	"bytes"
	"reflect"
	"sync/atomic"

	"github.com/rezuscloud/rezuscloud/domain"
)

// SchemaLevels says at which storage schema level the store writes.
type SchemaLevels interface {
	// WriteLevel is the level appends are written at: the lowest level
	// every running replica reads. It is asked on every append, so it must
	// be a cached value (Replicas keeps it from the heartbeats).
	WriteLevel() int
}

// writeLevel is the level this append is written at, within the levels
// this build knows.
func (s *Store) writeLevel() int {
	if s.cfg.Schema == nil {
		return domain.SchemaLevel
	}
	return min(max(s.cfg.Schema.WriteLevel(), domain.MinSchemaLevel), domain.SchemaLevel)
}

// atLevel rewrites ev as level stores it: its object without what the
// level does not know, and the level stamped (none for level 1, so such an
// event is what a release before levels wrote).
func atLevel(ev *domain.Event, level int) error {
	if level < domain.SchemaLevel {
		obj, err := domain.DownConvert(ev.Object.Kind, ev.Object, level)
		if err != nil {
			return err
		}
		ev.Object = obj
	}
	ev.Schema = 0
	if level > domain.MinSchemaLevel {
		ev.Schema = level
	}
	return nil
}

// schemaSeen remembers whether this process has met a record or replica of
// a level above its own. Until it has, Update may decide on a cache's
// state (UpdateOptions.Hint); after, every write loads the record and
// checks its level first.
type schemaSeen struct{ newer atomic.Bool }

// note records the level of a record or replica met.
func (s *schemaSeen) note(level int) {
	if s != nil && level > domain.SchemaLevel && !s.newer.Load() {
		s.newer.Store(true)
	}
}

// met reports whether a newer level was met.
func (s *schemaSeen) met() bool { return s != nil && s.newer.Load() }

// NoteSchemaLevel tells the store a replica of level runs on this data
// (Replicas calls it for every heartbeat): above this build's level, the
// store stops trusting cached states for writes (UpdateOptions.Hint),
// which do not say what level wrote them.
func (s *Store) NoteSchemaLevel(level int) { s.seen.note(level) }

// readEvent brings a decoded event to this build's level and notes a newer one.
func readEvent(seen *schemaSeen, ev *domain.Event) error {
	seen.note(ev.Level())
	return domain.UpConvertEvent(ev)
}

// refuseNewer is the answer to a write on top of rec when a newer release
// wrote rec: nil when this build may rewrite it.
func (s *Store) refuseNewer(ref domain.Ref, rec *Record) error {
	if rec == nil || rec.Event.Level() <= domain.SchemaLevel {
		return nil
	}
	return domain.NewNewerSchema(ref.Kind, ref.Name, rec.Event.Level(), s.cfg.Release)
}

// unchangedAtLevel reports whether events, written at the store's level,
// would store state again: an update that changed only what the level
// does not hold (a wait recorded while an older replica runs). Without it
// such a write would append an event each time it is made. Only below
// this build's level, so the newest level costs nothing.
func (s *Store) unchangedAtLevel(state *domain.Object, events []domain.Event) bool {
	level := s.writeLevel()
	if state == nil || len(events) != 1 || events[0].Action != domain.ActionUpdated || level >= domain.SchemaLevel {
		return false
	}
	if err := atLevel(&events[0], level); err != nil {
		return false // Append says it
	}
	next := events[0].Object
	if !bytes.Equal(next.Spec, state.Spec) || !bytes.Equal(next.Status, state.Status) {
		return false
	}
	a, b := next.Metadata, state.Metadata
	a.ResourceVersion, b.ResourceVersion = "", ""
	return reflect.DeepEqual(a, b)
}
