package upgrade

import (
	"context"
	"net/url"
	"strings"
	"sync"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// plan reads the version every machine runs, refuses a run that would skip
// or downgrade a minor version, orders the machines and starts the run.
func (r *upgradeRun) plan(ctx context.Context) error {
	ngs, err := projections.List[domain.NodeGroup](r.s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: r.ref.Tenant})
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, ng := range ngs {
		known[ng.Metadata.Name] = true
	}
	var missing []string
	for _, ng := range r.spec.NodeGroups {
		if !known[ng] {
			missing = append(missing, ng)
		}
	}
	if len(missing) > 0 {
		return r.finish(ctx, domain.UpgradeFailed, "refused: no node group "+strings.Join(missing, ", ")+" in the tenant")
	}
	if p := r.providerProblem(ngs); p != "" {
		return r.finish(ctx, domain.UpgradeFailed, clipBytes("refused: "+p, domain.MaxUpgradeReasonBytes))
	}
	all, err := projections.List[domain.Machine](r.s.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: r.ref.Tenant})
	if err != nil {
		return err
	}
	var machines []domain.Machine
	for _, m := range all {
		if r.spec.Includes(m.Spec.NodeGroup) {
			machines = append(machines, m)
		}
	}
	if len(machines) == 0 {
		return r.record(ctx, func(st *domain.UpgradeStatus) {
			st.Phase, st.StartTime, st.EndTime, st.Reason = domain.UpgradeSucceeded, r.now(), r.now(), "no machines to upgrade"
		})
	}
	from, fromSchematics, unreachable := r.versions(ctx, machines)
	if len(unreachable) > 0 {
		return r.finish(ctx, domain.UpgradeFailed, "refused: cannot read the version of "+strings.Join(unreachable, "; "))
	}
	leader := r.leader(ctx, machines)
	toSchematics := map[string]string{}
	for i := range machines {
		toSchematics[machines[i].Metadata.Name] = r.installer(&machines[i], r.spec.TalosVersion).Schematic
	}
	steps := withSchematics(planUpgrade(machines, r.spec.TalosVersion, leader, from), fromSchematics, toSchematics)
	k8s := ""
	if t, ok, err := projections.Get[domain.Tenant](r.s.cfg.Cache, domain.TenantRef(r.ref.Tenant)); err == nil && ok {
		k8s = talos.KubernetesVersionOf(t)
	}
	if p := upgradePathProblems(steps, func(from, to string) string { return talos.TalosUpgradeProblem(from, to, k8s) }); p != "" {
		return r.record(ctx, func(st *domain.UpgradeStatus) {
			st.Phase, st.Machines, st.Reason, st.StartTime, st.EndTime = domain.UpgradeFailed, steps, p, r.now(), r.now()
		})
	}
	return r.record(ctx, func(st *domain.UpgradeStatus) {
		st.Phase, st.Machines, st.StartTime, st.Reason = domain.UpgradeRunning, steps, r.now(), ""
	})
}

// versions asks every machine its version and schematic, 16 at a time.
func (r *upgradeRun) versions(ctx context.Context, machines []domain.Machine) (map[string]string, map[string]string, []string) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]string{}
		sch = map[string]string{}
		bad []string
	)
	sem := make(chan struct{}, 16)
	for i := range machines {
		m := &machines[i]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			v, s, err := r.nodes.versionAndSchematic(ctx, m)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				bad = append(bad, m.Metadata.Name+" ("+describeTalosErr(err)+")")
				return
			}
			out[m.Metadata.Name], sch[m.Metadata.Name] = v, s
		}()
	}
	wg.Wait()
	return out, sch, bad
}

// leader names the machine that leads etcd, asking the control planes among
// machines in turn; "" when none answers (the order is then by name).
func (r *upgradeRun) leader(ctx context.Context, machines []domain.Machine) string {
	for i := range machines {
		m := &machines[i]
		if m.Spec.Role != domain.RoleControlPlane {
			continue
		}
		v, err := r.nodes.etcd(ctx, m)
		if err != nil {
			continue
		}
		for _, mb := range v.members {
			if mb.GetId() == v.leader {
				if lm := r.memberMachine(mb.GetHostname(), mb.GetPeerUrls()); lm != nil {
					return lm.Metadata.Name
				}
			}
		}
		return ""
	}
	return ""
}

// memberMachine finds the tenant's machine of an etcd member, by name,
// hostname or the address in its peer URLs.
func (r *upgradeRun) memberMachine(hostname string, peerURLs []string) *domain.Machine {
	machines, err := projections.List[domain.Machine](r.s.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: r.ref.Tenant})
	if err != nil {
		return nil
	}
	hosts := map[string]bool{}
	for _, p := range peerURLs {
		if u, err := url.Parse(p); err == nil {
			hosts[u.Hostname()] = true
		}
	}
	for i := range machines {
		m := &machines[i]
		if m.Spec.Role != domain.RoleControlPlane {
			continue
		}
		if m.Metadata.Name == hostname || (m.Spec.Hostname != "" && m.Spec.Hostname == hostname) || (m.Spec.Address != "" && hosts[m.Spec.Address]) {
			return m
		}
	}
	return nil
}

// providerProblem says which Providers of the run's node groups (ngs: the
// tenant's) do not run its target (their spec.versions), or "". The API
// refuses such an Upgrade when it is written; this catches the runs no
// API write checked: those a Rollout creates, and a Provider's versions
// narrowed since (the emulator restarted with other tools).
func (r *upgradeRun) providerProblem(ngs []domain.NodeGroup) string {
	var covered []domain.NodeGroup
	for _, ng := range ngs {
		if r.spec.Includes(ng.Metadata.Name) && ng.Metadata.DeletionTimestamp == nil {
			covered = append(covered, ng)
		}
	}
	versionsOf := func(p string) *domain.ProviderVersions { return projections.ProviderVersions(r.s.cfg.Cache, p) }
	problem := (*domain.ProviderVersions).TalosProblem
	if r.spec.Kubernetes() {
		problem = (*domain.ProviderVersions).KubernetesProblem
	}
	return strings.Join(domain.GroupVersionProblems(r.target(), covered, versionsOf, problem), "; ")
}
