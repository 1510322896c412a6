package domain

import (
	"encoding/json"
	"time"
)

// ConfigChange is one entry of a machine's config history: a config that
// reached it (its hash, and how: the ConfigApplied condition recorded after
// it) or one that did not (no hash, the failure's reason and message).
type ConfigChange struct {
	Time  time.Time
	Actor string
	// Hash is the config hash the machine received; "" for a failure.
	Hash string
	// Reason and Message are the ConfigApplied condition's: Day0,
	// AppliedInPlace, AppliedWithReboot, or why the config did not apply.
	Reason, Message string
	// Awaiting says no outcome is recorded yet (the status follows the hash).
	Awaiting bool
}

// ConfigHistory reads a machine's config history from its events, oldest
// first (the rezusctl describe and web UI surfaces share it). A change of the
// config-hash annotation (MachineConfigApplied, or the day-0 hash on the
// machine's creation) opens an entry; the status written next
// (configUpToDate and the ConfigApplied condition) says how it went. The
// config path records the hash before the status (two events), so the
// post-image of the hash's own event still carries the previous condition;
// and a status that would not change is not written, so an entry that no
// status change follows took the outcome the machine already showed. A
// condition turning False without a new hash is a failure entry (Unknown, a
// config waiting for its turn, is not).
type ConfigHistory struct {
	changes []ConfigChange
	// hash is the last config hash seen; status the last configUpToDate and
	// ConfigApplied condition as a comparable key, upToDate and cond those.
	hash, status string
	upToDate     bool
	cond         *Condition
	// awaiting is the index of the entry whose outcome is not known yet, or -1.
	awaiting int
}

// NewConfigHistory is an empty history.
func NewConfigHistory() *ConfigHistory { return &ConfigHistory{awaiting: -1} }

// Add reads one event of the machine: its type, actor, time and post-image.
func (h *ConfigHistory) Add(eventType, actor string, at time.Time, m *Object) {
	if m == nil {
		return
	}
	var st MachineStatus
	_ = json.Unmarshal(m.Status, &st)
	c := FindCondition(st.Conditions, ConditionConfigApplied)
	status := "false"
	if st.ConfigUpToDate {
		status = "true"
	}
	if c != nil {
		status += "\x00" + c.Status + "\x00" + c.Reason + "\x00" + c.Message
	}
	if hash := m.Metadata.Annotations[AnnotationConfigHash]; hash != "" && hash != h.hash {
		h.settle()
		h.hash = hash
		ch := ConfigChange{Time: at, Actor: actor, Hash: hash}
		// Only an event that wrote the hash alone carries the status from
		// before; one that wrote both (a creation with its status) says how.
		if eventType != EventMachineConfigApplied && c != nil {
			ch.Reason, ch.Message = c.Reason, c.Message
		} else {
			h.awaiting = len(h.changes)
		}
		h.changes = append(h.changes, ch)
		h.status, h.upToDate, h.cond = status, st.ConfigUpToDate, c
		return
	}
	if status == h.status {
		return
	}
	prev := h.cond
	h.status, h.upToDate, h.cond = status, st.ConfigUpToDate, c
	switch {
	case c == nil:
	case h.awaiting >= 0:
		h.changes[h.awaiting].Reason, h.changes[h.awaiting].Message = c.Reason, c.Message
		h.awaiting = -1
	case c.Status == "False" && (prev == nil || prev.Status != c.Status || prev.Reason != c.Reason || prev.Message != c.Message):
		reason := c.Reason
		if reason == "" {
			reason = c.Type + "=" + c.Status
		}
		h.changes = append(h.changes, ConfigChange{Time: at, Actor: actor, Reason: reason, Message: c.Message})
	}
}

// settle gives the entry awaiting its outcome the one the machine shows,
// when it shows its config up to date: no status change followed the hash
// because none was needed. Otherwise its outcome stays unknown.
func (h *ConfigHistory) settle() {
	if h.awaiting < 0 {
		return
	}
	if h.upToDate && h.cond != nil && h.cond.Status == "True" {
		h.changes[h.awaiting].Reason, h.changes[h.awaiting].Message = h.cond.Reason, h.cond.Message
	}
	h.awaiting = -1
}

// Changes is the history so far, oldest first. The newest entry is Awaiting
// when its outcome is not recorded yet and the machine does not show its
// config up to date.
func (h *ConfigHistory) Changes() []ConfigChange {
	out := append([]ConfigChange(nil), h.changes...)
	if i := h.awaiting; i >= 0 {
		if h.upToDate && h.cond != nil && h.cond.Status == "True" {
			out[i].Reason, out[i].Message = h.cond.Reason, h.cond.Message
		} else {
			out[i].Awaiting = true
		}
	}
	return out
}
