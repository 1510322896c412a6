package eventstore

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/rezuscloud/rezuscloud/domain"
)

// sharedSlots is how many recently decoded events the store keeps: more
// than the largest backlog its in-process consumers pull at once (256
// unacknowledged each), so they find one another's decodes.
const sharedSlots = 4096

// sharedEvents are the recently decoded events of the stream, by sequence.
type sharedEvents struct {
	mu    sync.Mutex
	slots [sharedSlots]sharedSlot
}

type sharedSlot struct {
	seq uint64
	ev  *domain.Event
}

// SharedEvent decodes the event at stream sequence seq (data is its
// message), or returns the one decoded before by another in-process
// consumer: the controllers each take every event, and decoding it once
// instead of once per controller is a cost per event saved. The event is
// shared: callers must not change it (domain.Evolve copies it).
func (s *Store) SharedEvent(seq uint64, data []byte) (*domain.Event, error) {
	slot := &s.shared.slots[seq%sharedSlots]
	s.shared.mu.Lock()
	if slot.seq == seq && slot.ev != nil {
		ev := slot.ev
		s.shared.mu.Unlock()
		return ev, nil
	}
	s.shared.mu.Unlock()
	ev := &domain.Event{}
	err := json.Unmarshal(data, ev)
	if err == nil && ev.Object == nil {
		err = fmt.Errorf("event %d has no object", seq)
	}
	if err == nil {
		err = readEvent(s.seen, ev)
	}
	if err != nil {
		// Every controller meets it: the dead letter is kept once (its id
		// is the sequence), the count and the log are per meeting.
		s.dead.record(StreamName, seq, "", data, err)
		return nil, fmt.Errorf("decoding event %d: %w", seq, err)
	}
	s.shared.mu.Lock()
	slot.seq, slot.ev = seq, ev
	s.shared.mu.Unlock()
	return ev, nil
}
