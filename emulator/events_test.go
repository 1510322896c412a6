package emulator

import (
	"context"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// eventStream is the server side of an Events call: it keeps what is sent
// and runs onHello when the first event (the hello) goes out.
type eventStream struct {
	grpc.ServerStream
	sent    []*machine.Event
	onHello func()
}

func (s *eventStream) Send(ev *machine.Event) error {
	s.sent = append(s.sent, ev)
	if len(s.sent) == 1 && s.onHello != nil {
		s.onHello()
	}
	return nil
}

func (s *eventStream) Context() context.Context { return context.Background() }

// A client acts once it has the stream's hello (talosctl --wait sends its
// Reset then), so what the action records right after the hello must reach
// the stream, even with tail_events 0 ("nothing from before"): the reset's
// stopAllServices task is what talosctl waits for before the node is gone.
func TestEventsStreamStartsBeforeItsHello(t *testing.T) {
	n := &node{st: NodeStatus{Name: "n1"}, events: newEventLog("0123456789abcdef")}
	n.event("", &machine.SequenceEvent{Sequence: "boot", Action: machine.SequenceEvent_STOP}) // from before: not sent
	stream := &eventStream{onHello: func() {
		n.mu.Lock()
		n.goingDownLocked("actor-1", "reset")
		n.mu.Unlock()
	}}
	require.NoError(t, (&machineServer{n: n}).Events(&machine.EventsRequest{TailEvents: 0}, stream))

	var tasks []string
	for _, ev := range stream.sent[1:] {
		require.Equal(t, "actor-1", ev.ActorId, "only the reset's events follow the hello")
		var task machine.TaskEvent
		if ev.Data.MessageIs(&task) {
			require.NoError(t, ev.Data.UnmarshalTo(&task))
			tasks = append(tasks, task.Task+" "+task.Action.String())
		}
	}
	require.Equal(t, []string{"stopAllServices START", "stopAllServices STOP"}, tasks)
}
