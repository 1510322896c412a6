package emulator

import (
	"fmt"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxEvents is how many events a boot keeps for clients that ask for a tail;
// machined keeps a circular buffer of the same order.
const maxEvents = 1000

// eventLog is one boot's machine events, as machined's runtime events are: a
// reboot starts a new, empty log (Events with tail -1 answers the events since
// the boot, which is how `talosctl reboot --wait` knows the node came back).
// It is closed when the node goes down, which ends every Events stream.
type eventLog struct {
	prefix string // makes ids unique across boots

	mu      sync.Mutex
	events  []*machine.Event
	seq     int
	changed chan struct{} // closed and replaced on every append
	closed  bool
}

func newEventLog(bootID string) *eventLog {
	return &eventLog{prefix: bootID[:8], changed: make(chan struct{})}
}

// add appends an event whose payload is one of the runtime event messages
// (SequenceEvent, TaskEvent, ServiceStateEvent, MachineStatusEvent, …).
func (l *eventLog) add(host, actorID string, payload proto.Message) {
	if l == nil {
		return
	}
	b, err := proto.Marshal(payload)
	if err != nil {
		return // the runtime event messages always marshal
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.seq++
	l.events = append(l.events, &machine.Event{
		Metadata: &common.Metadata{Hostname: host},
		Data:     &anypb.Any{TypeUrl: "talos/runtime/" + string(payload.ProtoReflect().Descriptor().FullName()), Value: b},
		Id:       fmt.Sprintf("%s%012d", l.prefix, l.seq),
		ActorId:  actorID,
	})
	if len(l.events) > maxEvents {
		l.events = l.events[len(l.events)-maxEvents:]
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// close ends the log's streams once they have sent what it holds.
func (l *eventLog) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.changed)
	}
}

// since returns the events after the one with id after ("" for all), the
// channel closed on the next change, and whether the log is closed.
func (l *eventLog) since(after string) ([]*machine.Event, <-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	if after != "" {
		for j, ev := range l.events {
			if ev.Id == after {
				i = j + 1
			}
		}
	}
	return append([]*machine.Event(nil), l.events[i:]...), l.changed, l.closed
}

// start picks where a stream begins: tail_events n > 0 sends the last n,
// -1 every event of the boot, 0 none of the past ones; tail_id starts after
// that event. It returns the id of the last event not to send ("" for all).
func (l *eventLog) start(req *machine.EventsRequest) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if req.GetTailId() != "" {
		return req.GetTailId()
	}
	n := int(req.GetTailEvents())
	switch {
	case n < 0 || len(l.events) == 0:
		return ""
	case n == 0:
		return l.events[len(l.events)-1].Id
	case n >= len(l.events):
		return ""
	default:
		return l.events[len(l.events)-n-1].Id
	}
}

// Events streams the boot's machine events as machined does: an empty
// "hello" event first, then the tail asked for, then new events until the
// client goes or the node goes down.
func (m *machineServer) Events(req *machine.EventsRequest, srv grpc.ServerStreamingServer[machine.Event]) error {
	m.n.mu.Lock()
	log := m.n.events
	m.n.mu.Unlock()
	// Where the stream starts is fixed before the hello: a client acts once
	// it has the hello (talosctl --wait sends its Reset then), and the
	// action's events may be in the log before this handler runs again; a
	// start taken after the hello would skip them, and the client would wait
	// for them until it gave up.
	last := log.start(req)
	if err := srv.Send(&machine.Event{Metadata: m.meta(), ActorId: req.GetWithActorId()}); err != nil {
		return err
	}
	for {
		events, changed, closed := log.since(last)
		for _, ev := range events {
			last = ev.Id
			if a := req.GetWithActorId(); a != "" && ev.ActorId != a {
				continue
			}
			if err := srv.Send(ev); err != nil {
				return err
			}
		}
		if closed {
			return nil
		}
		select {
		case <-changed:
		case <-srv.Context().Done():
			return srv.Context().Err()
		}
	}
}

func (n *node) event(actorID string, payload proto.Message) {
	n.events.add(n.st.Name, actorID, payload)
}

// bootingEventsLocked records a configured boot's start: the boot sequence
// and services starting; the machine is not ready yet.
func (n *node) bootingEventsLocked() {
	n.event("", &machine.SequenceEvent{Sequence: "boot", Action: machine.SequenceEvent_START})
	n.event("", &machine.MachineStatusEvent{Stage: machine.MachineStatusEvent_BOOTING, Status: &machine.MachineStatusEvent_MachineStatus{
		UnmetConditions: []*machine.MachineStatusEvent_MachineStatus_UnmetCondition{{Name: "services", Reason: "services are starting"}},
	}})
	for _, id := range serviceIDs(n.st.Role == "controlplane") {
		n.event("", &machine.ServiceStateEvent{Service: id, Action: machine.ServiceStateEvent_STARTING, Message: "Starting service"})
	}
}

// runningEventsLocked records services up and the machine running and ready,
// the event `talosctl reboot --wait` and `upgrade --wait` wait for.
func (n *node) runningEventsLocked() {
	for _, id := range serviceIDs(n.st.Role == "controlplane") {
		n.event("", &machine.ServiceStateEvent{Service: id, Action: machine.ServiceStateEvent_RUNNING, Message: "Health check successful",
			Health: &machine.ServiceHealth{Healthy: true, LastChange: timestamppb.New(n.boot.running)}})
	}
	n.event("", &machine.SequenceEvent{Sequence: "boot", Action: machine.SequenceEvent_STOP})
	n.event("", &machine.MachineStatusEvent{Stage: machine.MachineStatusEvent_RUNNING, Status: &machine.MachineStatusEvent_MachineStatus{Ready: true}})
}

// goingDownLocked records the sequence that takes the node down (reboot,
// reset, install) with the actor that asked for it, then ends the boot's
// event streams.
func (n *node) goingDownLocked(actorID, seq string) {
	stage := machine.MachineStatusEvent_REBOOTING
	if seq == "reset" {
		stage = machine.MachineStatusEvent_RESETTING
	}
	n.event(actorID, &machine.SequenceEvent{Sequence: seq, Action: machine.SequenceEvent_START})
	n.event(actorID, &machine.MachineStatusEvent{Stage: stage, Status: &machine.MachineStatusEvent_MachineStatus{}})
	if seq == "reset" && n.st.Role == "controlplane" {
		n.event(actorID, &machine.TaskEvent{Task: "leaveEtcd", Action: machine.TaskEvent_START})
		n.event(actorID, &machine.TaskEvent{Task: "leaveEtcd", Action: machine.TaskEvent_STOP})
	}
	n.event(actorID, &machine.TaskEvent{Task: "stopAllServices", Action: machine.TaskEvent_START})
	n.event(actorID, &machine.TaskEvent{Task: "stopAllServices", Action: machine.TaskEvent_STOP})
	n.events.close()
}
