package emulator

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// serviceIDs are the services of a node of each role, as `talosctl services` lists them.
func serviceIDs(controlPlane bool) []string {
	if controlPlane {
		return []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "syslogd", "trustd", "udevd"}
	}
	return []string{"apid", "containerd", "cri", "kubelet", "machined", "syslogd", "udevd"}
}

// goroutineServices run inside machined rather than as containers.
var goroutineServices = map[string]bool{"machined": true, "syslogd": true}

// serviceView is one service as machined's service runner reports it: its
// state, its health and the events that led there, each with the time of the
// boot stage it comes from (the API coming up, services running, etcd
// bootstrapped), so LAST CHANGE and the event ages are real.
type serviceView struct {
	ID          string
	State       string // Preparing, Running, Finished, …
	Healthy     bool
	Unknown     bool // no health check has run yet
	LastMessage string
	LastChange  time.Time
	Events      []*machine.ServiceEvent
}

// bootTimes are when the current boot reached its stages.
type bootTimes struct {
	booted, running time.Time // running is zero while services start
}

func serviceEvent(state, msg string, at time.Time) *machine.ServiceEvent {
	return &machine.ServiceEvent{State: state, Msg: msg, Ts: timestamppb.New(at)}
}

// services derives the node's services from its status: starting while the
// node boots, etcd preparing until the cluster is bootstrapped and finished
// once the node left etcd, unhealthy under the fault.
//
// With the real control plane, real says which of etcd and kubelet run: once
// the cluster is bootstrapped, one that does not yet stays Starting, with no
// health, until it does (before, a kubelet has no API server to register
// with and reports healthy, as Talos's does).
func services(st NodeStatus, t bootTimes, bootstrapped bool, real map[string]bool) []serviceView {
	var out []serviceView
	for _, id := range serviceIDs(st.Role == "controlplane") {
		start := serviceEvent("Preparing", "Running pre state", t.booted)
		runner := serviceEvent("Preparing", "Creating service runner", t.booted)
		v := serviceView{ID: id, LastChange: t.booted}
		switch {
		case t.running.IsZero():
			v.State, v.Unknown, v.LastMessage = "Starting", true, "starting"
			v.Events = []*machine.ServiceEvent{start, runner, serviceEvent("Starting", "Starting service", t.booted)}
		case id == "etcd" && !bootstrapped:
			v.State, v.Unknown, v.LastMessage = "Preparing", true, "waiting for bootstrap"
			v.Events = []*machine.ServiceEvent{start, serviceEvent("Preparing", "Waiting for bootstrap", t.booted)}
		case id == "etcd" && st.EtcdLeft:
			v.State, v.LastMessage, v.LastChange = "Finished", "left the etcd cluster", t.running
			v.Events = []*machine.ServiceEvent{start, runner, serviceEvent("Finished", "Service finished successfully: left the etcd cluster", t.running)}
		case real != nil && bootstrapped && (id == "etcd" || id == "kubelet") && !real[id]:
			v.State, v.Unknown, v.LastMessage = "Starting", true, "waiting for the process to run"
			v.Events = []*machine.ServiceEvent{start, runner, serviceEvent("Starting", "Starting service", t.running)}
		default:
			started := fmt.Sprintf("Started task %s (PID %d) for container %s", id, pid(st.Name, id), id)
			if goroutineServices[id] {
				started = "Service started as goroutine"
			}
			v.State, v.Healthy, v.LastChange = "Running", true, t.running
			v.Events = []*machine.ServiceEvent{start, runner, serviceEvent("Running", started, t.running),
				serviceEvent("Running", "Health check successful", t.running)}
			if st.Faults.Unhealthy {
				v.Healthy, v.LastMessage = false, "emulated fault: unhealthy"
				v.Events = append(v.Events, serviceEvent("Running", "Health check failed: emulated fault: unhealthy", t.running))
			}
		}
		out = append(out, v)
	}
	return out
}

// pid is a stable, plausible process id for a service of a node.
func pid(node, service string) uint32 { return 1000 + uint32(memberID(node+"/"+service)%30000) }

func (v serviceView) info() *machine.ServiceInfo {
	h := &machine.ServiceHealth{Unknown: v.Unknown, Healthy: v.Healthy, LastMessage: v.LastMessage, LastChange: timestamppb.New(v.LastChange)}
	return &machine.ServiceInfo{Id: v.ID, State: v.State, Health: h, Events: &machine.ServiceEvents{Events: v.Events}}
}

// nodeServices reads what services needs about n.
func (n *node) nodeServices() []serviceView {
	n.mu.Lock()
	st, t := n.st, n.boot
	n.mu.Unlock()
	if st.Role == "" {
		return nil
	}
	return services(st, t, n.em.bootstrapped(st.ClusterID), n.em.kube.running(st))
}

// ServiceList reports each service with every field machined sets: state,
// health with its last change, and the service's events with their times.
func (m *machineServer) ServiceList(context.Context, *emptypb.Empty) (*machine.ServiceListResponse, error) {
	var list []*machine.ServiceInfo
	for _, v := range m.n.nodeServices() {
		list = append(list, v.info())
	}
	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Metadata: m.meta(), Services: list}}}, nil
}
