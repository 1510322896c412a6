package domain

import (
	"fmt"
	"slices"
	"strings"
)

// The cluster-autoscaler's requests on a node group, decided on the
// group's current spec (RezusCloud's externalgrpc service runs them in a
// store update, so two requests never decide on the same count). Each
// returns the next spec or an error fit for the autoscaler (it backs off).

// AutoscalerProviderIDPrefix starts the provider ID RezusCloud gives a
// machine of an autoscaled group (rezuscloud://<tenant>/<machine>): its
// kubelet registers the Node with it, and the autoscaler matches Nodes to
// the instances the service lists by it, on every infrastructure alike.
const AutoscalerProviderIDPrefix = "rezuscloud://"

// AutoscalerProviderID is the provider ID of a tenant's machine.
func AutoscalerProviderID(tenant, machine string) string {
	return AutoscalerProviderIDPrefix + tenant + "/" + machine
}

// ParseAutoscalerProviderID returns the tenant and machine of a provider
// ID AutoscalerProviderID made.
func ParseAutoscalerProviderID(id string) (tenant, machine string, ok bool) {
	rest, ok := strings.CutPrefix(id, AutoscalerProviderIDPrefix)
	if !ok {
		return "", "", false
	}
	tenant, machine, ok = strings.Cut(rest, "/")
	return tenant, machine, ok && tenant != "" && machine != "" && !strings.Contains(machine, "/")
}

// AutoscalerError is a request the autoscaler made that the group's state
// refuses; Precondition says the request was fine but the state does not
// allow it now (FailedPrecondition rather than InvalidArgument).
type AutoscalerError struct {
	Message      string
	Precondition bool
}

func (e *AutoscalerError) Error() string { return e.Message }

func refuse(pre bool, format string, args ...any) error {
	return &AutoscalerError{Message: fmt.Sprintf(format, args...), Precondition: pre}
}

// autoscaled checks the group autoscales and returns its bounds.
func autoscaled(group string, s *NodeGroupSpec) (*Autoscaling, error) {
	if s.Autoscaling == nil {
		return nil, refuse(true, "node group %s does not autoscale (no spec.autoscaling)", group)
	}
	return s.Autoscaling, nil
}

// DecideIncrease adds delta machines. Beyond maxCount is an error, never
// a silent clamp.
func DecideIncrease(group string, s NodeGroupSpec, delta int) (NodeGroupSpec, error) {
	a, err := autoscaled(group, &s)
	if err != nil {
		return s, err
	}
	if delta <= 0 {
		return s, refuse(false, "delta must be positive, got %d", delta)
	}
	if s.Count+delta > a.MaxCount {
		return s, refuse(false, "node group %s: %d + %d machines is above maxCount %d", group, s.Count, delta, a.MaxCount)
	}
	next := s
	next.Members = resize(membersOf(&s), s.Count+delta)
	next.Count += delta
	return next, nil
}

// membersOf is the spec's list, made from 0..count-1 when it has none.
func membersOf(s *NodeGroupSpec) *Members {
	if s.Members != nil {
		return s.Members
	}
	return &Members{Indexes: s.MachineIndexes(), Next: s.Count}
}

// DecideDeleteNodes removes exactly the named machines of the group. A
// name the group does not have, or going below minCount, is an error; a
// machine already gone (a retried request) is not.
func DecideDeleteNodes(group string, s NodeGroupSpec, machines []string) (NodeGroupSpec, error) {
	a, err := autoscaled(group, &s)
	if err != nil {
		return s, err
	}
	m := membersOf(&s)
	drop := map[int]bool{}
	for _, name := range machines {
		i, ok := machineIndex(group, name)
		if !ok || group+"-"+fmt.Sprint(i) != name {
			return s, refuse(false, "machine %s is not of node group %s", name, group)
		}
		if i >= m.Next {
			return s, refuse(false, "machine %s is not of node group %s (no such index yet)", name, group)
		}
		if slices.Contains(m.Indexes, i) {
			drop[i] = true
		}
	}
	if len(drop) == 0 {
		return s, nil
	}
	if s.Count-len(drop) < a.MinCount {
		return s, refuse(true, "node group %s: removing %d of %d machines goes below minCount %d", group, len(drop), s.Count, a.MinCount)
	}
	return without(s, m, drop), nil
}

// without is s without the machines of m that drop names.
func without(s NodeGroupSpec, m *Members, drop map[int]bool) NodeGroupSpec {
	next := s
	next.Members = &Members{Next: m.Next}
	for _, i := range m.Indexes {
		if !drop[i] {
			next.Members.Indexes = append(next.Members.Indexes, i)
		}
	}
	next.Count = len(next.Members.Indexes)
	return next
}

// DecideDecreaseTarget lowers the target by -delta machines that do not
// exist yet (the autoscaler gives up on a scale-up): the newest of the
// group's machines that are not built (built says which are), never one
// that is.
func DecideDecreaseTarget(group string, s NodeGroupSpec, delta int, built func(machine string) bool) (NodeGroupSpec, error) {
	if _, err := autoscaled(group, &s); err != nil {
		return s, err
	}
	if delta >= 0 {
		return s, refuse(false, "delta must be negative, got %d", delta)
	}
	m := membersOf(&s)
	var unbuilt []int
	for _, i := range m.Indexes {
		if !built(group + "-" + fmt.Sprint(i)) {
			unbuilt = append(unbuilt, i)
		}
	}
	if -delta > len(unbuilt) {
		return s, refuse(true, "node group %s: only %d of its %d machines are not built yet; the target cannot go down by %d",
			group, len(unbuilt), s.Count, -delta)
	}
	drop := map[int]bool{}
	for _, i := range unbuilt[len(unbuilt)+delta:] {
		drop[i] = true
	}
	return without(s, m, drop), nil
}

// Instance states, as the autoscaler's externalgrpc protocol numbers them.
const (
	InstanceRunning  = 1
	InstanceCreating = 2
	InstanceDeleting = 3
)

// Instance error classes, as the autoscaler numbers them.
const (
	InstanceOutOfResources = 1
	InstanceOtherError     = 99
)

// AutoscaledInstance is one machine of a group as the autoscaler sees it.
type AutoscaledInstance struct {
	// ID is the machine's provider ID (AutoscalerProviderID).
	ID    string
	State int
	// ErrorCode, ErrorMessage and ErrorClass say why a machine being
	// created is not (the group's last apply failed); empty otherwise.
	ErrorCode, ErrorMessage string
	ErrorClass              int
}

// InstancesInput is what GroupInstances decides on.
type InstancesInput struct {
	Tenant, Group string
	Spec          *NodeGroupSpec
	// Machines are the names of the group's Machine objects (built).
	Machines []string
	// Ready says whether a built machine's Node is ready.
	Ready func(machine string) bool
	// ApplyError is the message of the tenant's last apply when it failed
	// after the group last changed; empty otherwise.
	ApplyError string
}

// GroupInstances lists the group's machines: members not built or not
// ready yet are creating (with the apply's error when it failed), built
// and ready ones running, built ones the group no longer keeps deleting.
func GroupInstances(in InstancesInput) []AutoscaledInstance {
	var out []AutoscaledInstance
	built := map[string]bool{}
	for _, m := range in.Machines {
		built[m] = true
	}
	for _, name := range in.Spec.MachineNames(in.Group) {
		inst := AutoscaledInstance{ID: AutoscalerProviderID(in.Tenant, name), State: InstanceCreating}
		switch {
		case built[name] && in.Ready(name):
			inst.State = InstanceRunning
		case !built[name] && in.ApplyError != "":
			inst.ErrorCode, inst.ErrorMessage = "ApplyFailed", in.ApplyError
			inst.ErrorClass = InstanceOtherError
			if outOfResources(in.ApplyError) {
				inst.ErrorCode, inst.ErrorClass = "OutOfResources", InstanceOutOfResources
			}
		}
		out = append(out, inst)
	}
	for _, name := range GroupGoingOf(in.Group, in.Spec, in.Machines) {
		out = append(out, AutoscaledInstance{ID: AutoscalerProviderID(in.Tenant, name), State: InstanceDeleting})
	}
	return out
}

// outOfResources reports whether an apply's error reads as the
// infrastructure having no room (quota, capacity), which the autoscaler
// treats as "try another group".
func outOfResources(msg string) bool {
	m := strings.ToLower(msg)
	for _, w := range []string{"quota", "out of resources", "insufficient", "capacity", "no valid host", "limit exceeded"} {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}
