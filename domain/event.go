package domain

import (
	"strconv"
	"time"
)

// Action is what an event did to its aggregate, the coarse view watchers need.
type Action string

// Actions.
const (
	ActionCreated Action = "Created"
	ActionUpdated Action = "Updated"
	ActionDeleted Action = "Deleted"
)

// Event is a domain event: the fact that a command changed an object. It carries
// who, when, why (correlation) and the object's post-image, so a subscriber
// needs no lookups. The post-image's resourceVersion is empty: the stream
// sequence the event gets is its resourceVersion.
type Event struct {
	// Type is the event name, e.g. TenantCreated, NodeGroupScaled, MachineStatusUpdated.
	Type          string    `json:"type"`
	Action        Action    `json:"action"`
	Actor         string    `json:"actor,omitempty"`
	Time          time.Time `json:"time"`
	CorrelationID string    `json:"correlationId,omitempty"`
	Object        *Object   `json:"object"`
	// Schema is the storage schema level the event (its object) was written
	// at; absent (0) is level 1, what releases before levels wrote, so an
	// event written at level 1 is byte for byte what such a release writes.
	// See Level and SchemaLevel.
	Schema int `json:"schema,omitempty"`
}

// Ref returns the reference of the event's aggregate.
func (e *Event) Ref() Ref { return e.Object.Ref() }

// Evolve applies an event at stream sequence seq to the aggregate's state and
// returns the new state; nil means the object no longer exists.
func Evolve(state *Object, ev *Event, seq uint64) *Object {
	if ev.Action == ActionDeleted {
		return nil
	}
	next := ev.Object.DeepCopy()
	next.Metadata.ResourceVersion = strconv.FormatUint(seq, 10)
	return next
}

// WatchType is the Kubernetes watch event type for an action.
func (a Action) WatchType() string {
	switch a {
	case ActionCreated:
		return "ADDED"
	case ActionDeleted:
		return "DELETED"
	default:
		return "MODIFIED"
	}
}
