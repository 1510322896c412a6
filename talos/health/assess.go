package health

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// checkedServices are the services whose health makes a machine ready, in the
// order they are reported.
func checkedServices(role string) []string {
	if role == domain.RoleControlPlane {
		return []string{"apid", "etcd", "kubelet"}
	}
	return []string{"apid", "kubelet"}
}

// observation is what the Talos API answered about one machine, reduced to
// what the assessment needs (no machinery types, so it is table-testable).
type observation struct {
	Machine domain.Machine
	// Err is why the machine could not be reached ("" when it answered Version).
	Err     string
	Version string
	// Services are the machine's services by id.
	Services map[string]domain.ServiceHealth
	// Members is the etcd member list the machine reported (control planes);
	// MembersErr is why it has none.
	Members    []etcdMember
	MembersErr string
	// MemberID is the id of the machine's own etcd member (0: none known).
	MemberID uint64
	// Extensions are the system extensions the node runs; Schematic the
	// Image Factory schematic of its image ("" when it reports none).
	Extensions []string
	Schematic  string
}

// etcdMember is one member of an EtcdMemberList answer.
type etcdMember struct {
	ID       uint64
	Name     string
	PeerURLs []string
	Learner  bool
}

// kubeObservation is what the tenant's Kubernetes API server answered.
type kubeObservation struct {
	// Checked is false when the tenant's machines run no Kubernetes.
	Checked bool
	// Err is why the API server could not be asked ("" when it answered).
	Err string
	// Ready is /readyz answering ok; NotReady says what it answered instead.
	Ready    bool
	NotReady string
	Version  string
	// Nodes are the cluster's Nodes by name.
	Nodes map[string]nodeObservation
}

// nodeObservation is one Node.
type nodeObservation struct {
	Ready bool
	// Message is the kubelet's message when it is not Ready.
	Message string
	Kubelet string
}

// assess turns the observations of a tenant's machines and of its API
// server into its health. It is pure: the same observations give the same
// answer.
func assess(tenant string, obs []observation, kube kubeObservation, start time.Time, took time.Duration) domain.TenantHealth {
	h := domain.TenantHealth{APIVersion: domain.APIVersion, Kind: domain.TenantHealthKind, Tenant: tenant,
		ObservedAt: start.UTC(), Duration: took.Round(time.Millisecond).String(), Machines: []domain.MachineHealth{}}
	obs = slices.Clone(obs)
	slices.SortStableFunc(obs, func(a, b observation) int { return compareMachines(&a.Machine, &b.Machine) })
	reachable := 0
	var machineReasons []string
	for _, o := range obs {
		mh := assessMachine(o)
		assessNode(&mh, o.Machine, kube)
		if mh.Reachable {
			reachable++
		}
		machineReasons = append(machineReasons, mh.Reasons...)
		h.Machines = append(h.Machines, mh)
	}
	h.Etcd = assessEtcd(obs, h.Machines)
	switch {
	case len(obs) == 0:
		h.State, h.Reasons = domain.HealthUnreachable, []string{"the tenant has no machines"}
		return h
	case reachable == 0:
		h.State, h.Reasons = domain.HealthUnreachable, machineReasons
		return h
	}
	h.Reasons = append(etcdReasons(h.Etcd, h.Machines), machineReasons...)
	if kube.Checked {
		h.Kubernetes = &domain.KubernetesHealth{Ready: kube.Err == "" && kube.Ready, Version: kube.Version}
		switch {
		case kube.Err != "":
			h.Kubernetes.Error = kube.Err
		case !kube.Ready:
			h.Kubernetes.Error = "not ready: " + kube.NotReady
		}
		if h.Kubernetes.Error != "" {
			h.Reasons = append([]string{"the Kubernetes API server: " + h.Kubernetes.Error}, h.Reasons...)
		}
	}
	h.State = domain.HealthReady
	if len(h.Reasons) > 0 {
		h.State = domain.HealthDegraded
	}
	return h
}

// compareMachines orders control planes first, then workers, each by name.
func compareMachines(a, b *domain.Machine) int {
	ra, rb := a.Spec.Role != domain.RoleControlPlane, b.Spec.Role != domain.RoleControlPlane
	switch {
	case ra != rb && !ra:
		return -1
	case ra != rb:
		return 1
	}
	return strings.Compare(a.Metadata.Name, b.Metadata.Name)
}

func assessMachine(o observation) domain.MachineHealth {
	m := o.Machine
	mh := domain.MachineHealth{Name: m.Metadata.Name, Role: m.Spec.Role, Address: m.Spec.Address}
	if o.Err != "" {
		mh.Error = o.Err
		mh.Reasons = []string{fmt.Sprintf("%s unreachable: %s", mh.Name, o.Err)}
		return mh
	}
	mh.Reachable, mh.TalosVersion, mh.Ready, mh.Stage = true, o.Version, true, "Running"
	mh.Schematic, mh.Extensions = o.Schematic, o.Extensions
	for _, id := range checkedServices(m.Spec.Role) {
		s, ok := o.Services[id]
		if !ok {
			s = domain.ServiceHealth{ID: id, State: "Missing"}
		}
		mh.Services = append(mh.Services, s)
		if s.State == "Starting" {
			mh.Stage = "Booting"
		}
		if s.Healthy && s.State == "Running" {
			continue
		}
		mh.Ready = false
		var r string
		switch s.State {
		case "Running":
			r = fmt.Sprintf("%s on %s is unhealthy", id, mh.Name)
		case "Missing":
			r = fmt.Sprintf("%s on %s is not running", id, mh.Name)
		default:
			r = fmt.Sprintf("%s on %s is %s", id, mh.Name, strings.ToLower(s.State))
		}
		if s.Message != "" {
			r += ": " + s.Message
		}
		mh.Reasons = append(mh.Reasons, r)
	}
	return mh
}

// nodeName is the Kubernetes Node of a machine: Talos names it after the
// machine's hostname.
func nodeName(m domain.Machine) string {
	if m.Spec.Hostname != "" {
		return m.Spec.Hostname
	}
	return m.Metadata.Name
}

// assessNode adds the machine's Node to its health: a machine whose Node is
// not Ready, or has none while the API server answers, is not ready. When
// the API server does not answer, the Node is Unknown and the machine is
// judged by Talos alone (the API server's own reason says what is wrong).
func assessNode(mh *domain.MachineHealth, m domain.Machine, kube kubeObservation) {
	if !kube.Checked {
		return
	}
	if kube.Err != "" {
		mh.Node = domain.NodeUnknown
		return
	}
	n, ok := kube.Nodes[nodeName(m)]
	switch {
	case !ok:
		mh.Node = domain.NodeMissing
		mh.Reasons = append(mh.Reasons, fmt.Sprintf("%s has no Kubernetes Node %s", mh.Name, nodeName(m)))
	case !n.Ready:
		mh.Node, mh.KubeletVersion = domain.NodeNotReady, n.Kubelet
		r := fmt.Sprintf("node %s of %s is NotReady", nodeName(m), mh.Name)
		if n.Message != "" {
			r += ": " + n.Message
		}
		mh.Reasons = append(mh.Reasons, r)
	default:
		mh.Node, mh.KubeletVersion = domain.NodeReady, n.Kubelet
		return
	}
	mh.Ready = false
}

// assessEtcd reads the member list of the first control plane (by name) that
// answered one, and marks each control plane's membership.
func assessEtcd(obs []observation, machines []domain.MachineHealth) domain.EtcdHealth {
	var (
		e        domain.EtcdHealth
		reporter *observation
	)
	for i := range obs {
		o := &obs[i]
		if o.Machine.Spec.Role != domain.RoleControlPlane || o.Err != "" {
			continue
		}
		if o.MembersErr == "" {
			reporter = o
			break
		}
		if e.Error == "" {
			e.Error = fmt.Sprintf("%s: %s", o.Machine.Metadata.Name, o.MembersErr)
		}
	}
	byName := map[string]*domain.MachineHealth{}
	for i := range machines {
		byName[machines[i].Name] = &machines[i]
	}
	if reporter == nil {
		if e.Error == "" {
			e.Error = "no control plane answered"
		}
		for i := range machines {
			if machines[i].Role == domain.RoleControlPlane {
				machines[i].Etcd = domain.EtcdUnknown
			}
		}
		return e
	}
	e.Error, e.ReportedBy = "", reporter.Machine.Metadata.Name
	members := map[string]bool{}
	voting := 0
	for _, mb := range reporter.Members {
		mh := domain.EtcdMemberHealth{Name: mb.Name, Learner: mb.Learner}
		if o := memberMachine(obs, mb); o != nil {
			mh.Machine = o.Machine.Metadata.Name
			members[mh.Machine] = true
			s, ok := o.Services["etcd"]
			mh.Healthy = o.Err == "" && ok && s.Healthy && s.State == "Running"
			if m := byName[mh.Machine]; m != nil {
				m.Etcd = domain.EtcdMemberUnhealthy
				if mh.Healthy {
					m.Etcd = domain.EtcdMemberHealthy
				}
			}
		}
		if !mb.Learner {
			voting++
			if mh.Healthy {
				e.Healthy++
			}
		}
		e.Members = append(e.Members, mh)
	}
	e.Quorum = e.Healthy > voting/2
	for i := range machines {
		if machines[i].Role == domain.RoleControlPlane && !members[machines[i].Name] {
			machines[i].Etcd = domain.EtcdNotMember
		}
	}
	return e
}

// memberMachine finds the control plane an etcd member runs on: the one
// whose own member (its etcd.Member resource) has the member's id, else by
// the member's name (the machine's name or hostname) or the host of its
// peer URL.
func memberMachine(obs []observation, mb etcdMember) *observation {
	for i := range obs {
		if mb.ID != 0 && obs[i].MemberID == mb.ID && obs[i].Machine.Spec.Role == domain.RoleControlPlane {
			return &obs[i]
		}
	}
	for i := range obs {
		m := &obs[i].Machine
		if m.Spec.Role != domain.RoleControlPlane {
			continue
		}
		if mb.Name != "" && (mb.Name == m.Metadata.Name || mb.Name == m.Spec.Hostname) {
			return &obs[i]
		}
	}
	for i := range obs {
		m := &obs[i].Machine
		if m.Spec.Role != domain.RoleControlPlane || m.Spec.Address == "" {
			continue
		}
		for _, pu := range mb.PeerURLs {
			if u, err := url.Parse(pu); err == nil && sameHost(u.Hostname(), m.Spec.Address) {
				return &obs[i]
			}
		}
	}
	return nil
}

func sameHost(a, b string) bool {
	if ia, ib := net.ParseIP(a), net.ParseIP(b); ia != nil && ib != nil {
		return ia.Equal(ib)
	}
	return strings.EqualFold(a, b)
}

// etcdReasons are the cluster-level reasons: quorum, membership, an unreadable member list.
func etcdReasons(e domain.EtcdHealth, machines []domain.MachineHealth) []string {
	hasCP := false
	for _, m := range machines {
		hasCP = hasCP || m.Role == domain.RoleControlPlane
	}
	if !hasCP {
		return []string{"the tenant has no control-plane machines"}
	}
	if e.ReportedBy == "" {
		return []string{"etcd membership unknown: " + e.Error}
	}
	var out []string
	voting := 0
	for _, mb := range e.Members {
		if !mb.Learner {
			voting++
		}
	}
	if !e.Quorum {
		out = append(out, fmt.Sprintf("etcd has lost quorum: %d of %d members healthy", e.Healthy, voting))
	}
	for _, mb := range e.Members {
		if mb.Machine == "" {
			out = append(out, fmt.Sprintf("etcd member %s is not a machine of this tenant", mb.Name))
		}
	}
	for _, m := range machines {
		if m.Etcd == domain.EtcdNotMember {
			out = append(out, fmt.Sprintf("%s is not an etcd member", m.Name))
		}
	}
	return out
}
