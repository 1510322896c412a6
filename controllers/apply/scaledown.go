package apply

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// Safe scale-down: before tofu destroys machines (a node group's count
// lowered, a group deleted) or metal resets machines that left their group,
// the control planes among them leave etcd one member at a time, in the
// order domain.PlanScaleDown gives (unhealthy first), each step checked
// against the live membership; the workers are reset gracefully. A step that
// would lose quorum fails the run before anything is destroyed.

// Nodes is what the scale-down needs of the Talos API (talos.NodeAPI).
type Nodes interface {
	EtcdMembers(ctx context.Context, b *secrets.Bundle, address string) ([]talos.EtcdMember, error)
	EtcdHealth(ctx context.Context, b *secrets.Bundle, address string) error
	EtcdLeave(ctx context.Context, b *secrets.Bundle, address string) error
	EtcdRemoveMember(ctx context.Context, b *secrets.Bundle, through string, id uint64) error
	Reset(ctx context.Context, b *secrets.Bundle, address string) error
}

// errScaleDownRefused marks a scale-down refused for etcd's sake.
var errScaleDownRefused = errors.New("scale-down refused")

// goingMachines are the tenant's machines of a kind (managed-by value) that
// keep is false for: what the coming run destroys (or resets).
func (w *Worker) goingMachines(tenant, managedBy string, keep func(name string) bool) ([]domain.Machine, error) {
	ms, err := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	var out []domain.Machine
	for _, m := range ms {
		if m.Metadata.Labels[ManagedByLabel] == managedBy && !keep(m.Metadata.Name) {
			out = append(out, m)
		}
	}
	return out, nil
}

// scaleDown takes the going machines out of the cluster before they are
// destroyed: they are drained, then control planes leave etcd and workers
// are reset. It returns an error (wrapping errScaleDownRefused when etcd
// forbids it, errDrainBlocked when a drain does not finish) when the run
// must not destroy anything.
func (w *Worker) scaleDown(ctx context.Context, tenant string, bundle *secrets.Bundle, going []domain.Machine, logw *tofu.LogWriter) error {
	return w.takeOut(ctx, tenant, bundle, going, false, logw)
}

// takeOut is scaleDown; replacing says the machines come back (a
// remediation), so the control planes left may be an even number meanwhile.
func (w *Worker) takeOut(ctx context.Context, tenant string, bundle *secrets.Bundle, going []domain.Machine, replacing bool, logw *tofu.LogWriter) error {
	if len(going) == 0 {
		return nil
	}
	if !w.allGo(tenant, going) {
		if err := w.drainGoing(ctx, tenant, going, logw); err != nil {
			return err
		}
	}
	if w.cfg.Nodes == nil {
		logw.Printf("scale-down: %d machines go; this server does not drive the Talos API, so they are destroyed without leaving etcd or being reset", len(going))
		return nil
	}
	var cps, workers []domain.Machine
	for _, m := range going {
		if m.Spec.Role == domain.RoleControlPlane {
			cps = append(cps, m)
		} else {
			workers = append(workers, m)
		}
	}
	if len(cps) > 0 {
		if err := w.leaveEtcd(ctx, tenant, bundle, cps, replacing, logw); err != nil {
			return err
		}
	}
	for _, m := range workers {
		if m.Spec.Address == "" {
			logw.Printf("scale-down: worker %s has no address: destroyed without a reset", m.Metadata.Name)
			continue
		}
		logw.Printf("scale-down: resetting worker %s (%s) gracefully", m.Metadata.Name, m.Spec.Address)
		if err := w.cfg.Nodes.Reset(ctx, bundle, m.Spec.Address); err != nil {
			logw.Printf("scale-down: worker %s cannot be reset (%v): destroyed anyway", m.Metadata.Name, err)
			continue
		}
		logw.Printf("scale-down: worker %s reset", m.Metadata.Name)
	}
	return nil
}

// allGo reports whether every machine of the tenant is going: the cluster
// goes with them, so nothing is drained and no Node is deleted.
func (w *Worker) allGo(tenant string, going []domain.Machine) bool {
	ms, err := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return false
	}
	for _, m := range ms {
		if !slices.ContainsFunc(going, func(g domain.Machine) bool { return g.Metadata.Name == m.Metadata.Name }) {
			return false
		}
	}
	return true
}

// etcdView is the tenant's control planes as etcd sees them now.
type etcdView struct {
	machines map[string]domain.Machine // every control plane by name
	health   map[string]error          // EtcdHealth of each
	members  []talos.EtcdMember
	byMember map[uint64]string // member id -> machine name ("" when none matches)
}

// leaveEtcd removes the going control planes from etcd one at a time.
func (w *Worker) leaveEtcd(ctx context.Context, tenant string, bundle *secrets.Bundle, going []domain.Machine, replacing bool, logw *tofu.LogWriter) error {
	ms, err := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return err
	}
	goingNames := map[string]bool{}
	var names []string
	for _, m := range going {
		goingNames[m.Metadata.Name] = true
		names = append(names, m.Metadata.Name)
	}
	keptCPs := 0
	allGo := true
	for _, m := range ms {
		if goingNames[m.Metadata.Name] {
			continue
		}
		allGo = false
		if m.Spec.Role == domain.RoleControlPlane {
			keptCPs++
		}
	}
	if allGo {
		logw.Printf("scale-down: every machine of the tenant goes: etcd goes with them, no member leaves first")
		return nil
	}
	if !w.bootstrapped(tenant) {
		logw.Printf("scale-down: etcd of the tenant was never bootstrapped: no member to remove")
		return nil
	}
	if keptCPs == 0 {
		return fmt.Errorf("%w: it would remove every control plane (%s) while other machines stay; nothing was destroyed", errScaleDownRefused, strings.Join(names, ", "))
	}
	v, err := w.etcdView(ctx, bundle, ms)
	if err != nil {
		return fmt.Errorf("%w: %v; nothing was destroyed", errScaleDownRefused, err)
	}
	plan, err := domain.PlanScaleDown(domain.ScaleDown{Members: v.etcdMembers(), Going: names, Replacing: replacing})
	if err != nil {
		return fmt.Errorf("%w: %v; nothing was destroyed", errScaleDownRefused, err)
	}
	logw.Printf("scale-down: etcd has %d members; %d leave, one at a time: %s", len(v.members), len(plan.Remove), memberNames(plan.Remove))
	for i, m := range plan.Remove {
		if err := w.removeMember(ctx, bundle, v, m, goingNames, logw); err != nil {
			return fmt.Errorf("%w: step %d (%s): %v; nothing was destroyed", errScaleDownRefused, i+1, m.Name, err)
		}
		if v, err = w.etcdView(ctx, bundle, ms); err != nil {
			return fmt.Errorf("%w: after %s left: %v; nothing was destroyed", errScaleDownRefused, m.Name, err)
		}
		if slices.ContainsFunc(v.members, func(e talos.EtcdMember) bool { return v.byMember[e.ID] == m.Name }) {
			return fmt.Errorf("%w: %s is still an etcd member after leaving; nothing was destroyed", errScaleDownRefused, m.Name)
		}
		healthy := 0
		for _, e := range v.etcdMembers() {
			if e.Healthy {
				healthy++
			}
		}
		if healthy < domain.EtcdQuorum(len(v.members)) {
			return fmt.Errorf("%w: after %s left, %d of %d etcd members are healthy (quorum %d); nothing was destroyed",
				errScaleDownRefused, m.Name, healthy, len(v.members), domain.EtcdQuorum(len(v.members)))
		}
		logw.Printf("scale-down: step %d/%d: %s left etcd; %d members remain, %d healthy (quorum %d)",
			i+1, len(plan.Remove), m.Name, len(v.members), healthy, domain.EtcdQuorum(len(v.members)))
	}
	return nil
}

// removeMember takes one member out: it leaves by itself when it answers,
// else it is removed by id through a healthy member that stays.
func (w *Worker) removeMember(ctx context.Context, bundle *secrets.Bundle, v etcdView, m domain.EtcdMember, going map[string]bool, logw *tofu.LogWriter) error {
	addr := v.machines[m.Name].Spec.Address
	if m.Healthy && addr != "" {
		err := w.cfg.Nodes.EtcdLeave(ctx, bundle, addr)
		if err == nil {
			logw.Printf("scale-down: %s (%s) left etcd (EtcdLeaveCluster)", m.Name, addr)
			return nil
		}
		logw.Printf("scale-down: %s cannot leave etcd by itself (%v): removing it through another member", m.Name, err)
	}
	through := v.healthyStaying(going)
	if through == "" {
		return errors.New("no healthy member that stays to remove it through")
	}
	for _, e := range v.members {
		if v.byMember[e.ID] != m.Name {
			continue
		}
		if err := w.cfg.Nodes.EtcdRemoveMember(ctx, bundle, v.machines[through].Spec.Address, e.ID); err != nil {
			return err
		}
		logw.Printf("scale-down: %s removed from etcd by id %x through %s (EtcdRemoveMemberByID)", m.Name, e.ID, through)
		return nil
	}
	return errors.New("it is not in the member list")
}

// etcdView reads every control plane's etcd health and the member list
// through a healthy one (by name order, so every run asks the same one).
func (w *Worker) etcdView(ctx context.Context, bundle *secrets.Bundle, ms []domain.Machine) (etcdView, error) {
	v := etcdView{machines: map[string]domain.Machine{}, health: map[string]error{}, byMember: map[uint64]string{}}
	var names []string
	for _, m := range ms {
		if m.Spec.Role != domain.RoleControlPlane {
			continue
		}
		v.machines[m.Metadata.Name] = m
		names = append(names, m.Metadata.Name)
		if m.Spec.Address == "" {
			v.health[m.Metadata.Name] = errors.New("it has no address")
			continue
		}
		v.health[m.Metadata.Name] = w.cfg.Nodes.EtcdHealth(ctx, bundle, m.Spec.Address)
	}
	slices.Sort(names)
	var lastErr error
	for _, n := range names {
		if v.health[n] != nil {
			continue
		}
		members, err := w.cfg.Nodes.EtcdMembers(ctx, bundle, v.machines[n].Spec.Address)
		if err != nil {
			lastErr = err
			continue
		}
		v.members = members
		for _, e := range members {
			v.byMember[e.ID] = v.match(e)
		}
		return v, nil
	}
	if lastErr == nil {
		lastErr = errors.New("no control plane serves etcd")
	}
	return v, fmt.Errorf("reading the etcd membership: %w", lastErr)
}

// match names the machine of a member: by its peer address, else its hostname.
func (v etcdView) match(e talos.EtcdMember) string {
	for _, pu := range e.PeerURLs {
		u, err := url.Parse(pu)
		if err != nil {
			continue
		}
		host := u.Hostname()
		for name, m := range v.machines {
			if m.Spec.Address != "" && (m.Spec.Address == host || hostOnly(m.Spec.Address) == host) {
				return name
			}
		}
	}
	for name, m := range v.machines {
		if e.Hostname != "" && (e.Hostname == m.Spec.Hostname || e.Hostname == name) {
			return name
		}
	}
	return ""
}

func hostOnly(address string) string {
	if h, _, err := net.SplitHostPort(address); err == nil {
		return h
	}
	return address
}

// etcdMembers are the members for domain.PlanScaleDown; a member no machine
// matches counts, unhealthy (it cannot be reached to ask).
func (v etcdView) etcdMembers() []domain.EtcdMember {
	var out []domain.EtcdMember
	for _, e := range v.members {
		name := v.byMember[e.ID]
		if name == "" {
			out = append(out, domain.EtcdMember{Name: fmt.Sprintf("etcd member %x (%s)", e.ID, e.Hostname)})
			continue
		}
		out = append(out, domain.EtcdMember{Name: name, NodeGroup: v.machines[name].Spec.NodeGroup, Healthy: v.health[name] == nil})
	}
	return out
}

// healthyStaying is a healthy member that stays, by name ("" when none).
func (v etcdView) healthyStaying(going map[string]bool) string {
	var out []string
	for _, e := range v.members {
		if n := v.byMember[e.ID]; n != "" && !going[n] && v.health[n] == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return ""
	}
	return out[0]
}

func memberNames(ms []domain.EtcdMember) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return strings.Join(out, ", ")
}

// bootstrapped reports whether the tenant's etcd was bootstrapped (its
// Bootstrapped condition; a tenant never bootstrapped has no members).
func (w *Worker) bootstrapped(tenant string) bool {
	t, ok, err := projections.Get[domain.Tenant](w.cfg.Cache, domain.TenantRef(tenant))
	if err != nil || !ok {
		return true // unknown: let the membership answer
	}
	c := domain.FindCondition(t.Status.Conditions, BootstrappedCondition)
	return c != nil && c.Status == "True"
}

// scaleDownTofu takes what the coming tofu apply destroys out of the
// cluster: the tofu-built machines the generated configuration no longer
// has. It answers the machines whose Nodes go once they are destroyed.
func (w *Worker) scaleDownTofu(ctx context.Context, tenant string, in providers.GenerateInput, logw *tofu.LogWriter) ([]domain.Machine, error) {
	keep := map[string]bool{}
	for _, g := range in.Groups {
		for _, m := range g.Machines {
			keep[m.Name] = true
		}
	}
	going, err := w.goingMachines(tenant, managedByValue, func(name string) bool { return keep[name] })
	if err != nil || len(going) == 0 {
		return nil, err
	}
	bundle, err := w.cfg.Bundles.Bundle(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("loading the tenant's PKI: %w", err)
	}
	if w.allGo(tenant, going) {
		return nil, w.scaleDown(ctx, tenant, bundle, going, logw)
	}
	return going, w.scaleDown(ctx, tenant, bundle, going, logw)
}

// leaveEtcdMetal drains the metal machines that left their group and takes
// the control planes among them out of etcd before they are reset. It
// answers the machines whose Nodes go once they are reset.
func (w *Worker) leaveEtcdMetal(ctx context.Context, tenant string, bundle *secrets.Bundle, wanted map[string]bool, logw *tofu.LogWriter) ([]domain.Machine, error) {
	going, err := w.goingMachines(tenant, managedByMetal, func(name string) bool { return wanted[name] })
	if err != nil || len(going) == 0 {
		return nil, err
	}
	if w.allGo(tenant, going) {
		return nil, nil
	}
	if err := w.drainGoing(ctx, tenant, going, logw); err != nil {
		return nil, err
	}
	cps := slices.DeleteFunc(slices.Clone(going), func(m domain.Machine) bool { return m.Spec.Role != domain.RoleControlPlane })
	if len(cps) == 0 || w.cfg.Nodes == nil {
		return going, nil
	}
	return going, w.leaveEtcd(ctx, tenant, bundle, cps, false, logw)
}
