package talos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Change is a write whose impact is asked (a dry run): the object as it
// would be stored. One of the three is set.
type Change struct {
	Tenant    *domain.Tenant
	NodeGroup *domain.NodeGroup
	Patch     *domain.ConfigPatch
}

// DryRunner asks a node how it would take a config (NodeAPI).
type DryRunner interface {
	ApplyConfigDryRun(ctx context.Context, b *secrets.Bundle, address string, cfg []byte) (ApplyResult, error)
}

// Impact says what change would do to each of the tenant's machines: the
// machines its node groups would no longer want (destroyed, highest index
// first, as the apply worker's scale-down takes them) or newly want
// (created), and for the others whether their rendered config changes and,
// by Talos's own dry-run answer, whether taking it reboots them. Nothing is
// written and no config is applied.
func (s *Service) Impact(ctx context.Context, tenant string, ch Change, nodes DryRunner) (domain.ChangeImpact, error) {
	v, err := s.load(ctx, tenant)
	if err != nil {
		return domain.ChangeImpact{}, err
	}
	groups, err := projections.List[domain.NodeGroup](s.cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return domain.ChangeImpact{}, err
	}
	now := map[string]*domain.NodeGroup{}
	next := map[string]*domain.NodeGroup{}
	for i := range groups {
		now[groups[i].Metadata.Name], next[groups[i].Metadata.Name] = &groups[i], &groups[i]
	}
	nextTenant, nextPatches := v.tenant, v.patches
	switch {
	case ch.Tenant != nil:
		nextTenant = ch.Tenant
		// Configs carry the Kubernetes version the status holds (an upgrade
		// moves it), as the apply worker renders them.
		nextTenant.Status = v.tenant.Status
	case ch.NodeGroup != nil:
		next[ch.NodeGroup.Metadata.Name] = ch.NodeGroup
	case ch.Patch != nil:
		nextPatches = slices.DeleteFunc(slices.Clone(v.patches), func(p domain.ConfigPatch) bool { return p.Metadata.Name == ch.Patch.Metadata.Name })
		nextPatches = append(nextPatches, *ch.Patch)
	}

	byGroup := map[string][]string{}
	for _, m := range v.machines {
		byGroup[m.Spec.NodeGroup] = append(byGroup[m.Spec.NodeGroup], m.Metadata.Name)
	}
	cp := v.firstControlPlane()
	type job struct {
		i     int
		addr  string
		cfg   []byte
		facts domain.ImpactFacts
	}
	var (
		out  []domain.MachineImpact
		jobs []job
	)
	for _, m := range v.machines {
		if m.Metadata.DeletionTimestamp != nil {
			continue
		}
		ng, ngNext := now[m.Spec.NodeGroup], next[m.Spec.NodeGroup]
		wanted := func(g *domain.NodeGroup) bool {
			return g != nil && g.Metadata.DeletionTimestamp == nil &&
				!slices.Contains(domain.GroupGoingOf(g.Metadata.Name, &g.Spec, byGroup[m.Spec.NodeGroup]), m.Metadata.Name)
		}
		if !wanted(ng) {
			continue // going already, whatever the change: not its doing
		}
		f := domain.ImpactFacts{Exists: true, Wanted: wanted(ngNext)}
		var nextCfg []byte
		if f.Wanted && ng != nil {
			before, err := Render(RenderInput{Tenant: v.tenant, NodeGroup: ng, Machine: &m, ControlPlaneAddress: cp, Patches: v.patches, Bundle: v.bundle, ImageFactory: v.factory})
			if err != nil {
				return domain.ChangeImpact{}, fmt.Errorf("machine %s: rendering its config: %w", m.Metadata.Name, err)
			}
			nextCfg, err = Render(RenderInput{Tenant: nextTenant, NodeGroup: ngNext, Machine: &m, ControlPlaneAddress: cp, Patches: nextPatches, Bundle: v.bundle, ImageFactory: v.factory})
			if err != nil {
				return domain.ChangeImpact{}, domain.NewInvalid(domain.MachineKind.Kind, m.Metadata.Name,
					[]domain.Cause{{Field: "spec", Type: domain.CauseInvalid, Message: "machine " + m.Metadata.Name + "'s config does not render with the change: " + err.Error()}})
			}
			f.ConfigChanges = !SameConfig(before, nextCfg)
			f.InstallChanges = f.ConfigChanges && installSection(before) != installSection(nextCfg)
			from := domain.InstallerOf(v.factory, &v.tenant.Spec, &ng.Spec, "").Schematic
			to := domain.InstallerOf(v.factory, &nextTenant.Spec, &ngNext.Spec, "").Schematic
			if to != "" && from != to {
				f.Reimage, f.FromSchematic, f.ToSchematic = true, from, to
			}
		}
		mi := domain.MachineImpact{Machine: m.Metadata.Name, NodeGroup: m.Spec.NodeGroup}
		out = append(out, mi)
		if f.ConfigChanges && f.Wanted {
			if m.Spec.Address == "" {
				f.Unanswered = "the machine has no address yet"
			} else {
				jobs = append(jobs, job{i: len(out) - 1, addr: m.Spec.Address, cfg: nextCfg, facts: f})
				continue
			}
		}
		out[len(out)-1] = withName(domain.DecideMachineImpact(f), mi)
	}
	// Talos's own answer, asked of every changing node at once (bounded).
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res, err := nodes.ApplyConfigDryRun(ctx, v.bundle, j.addr, j.cfg)
			f := j.facts
			if err != nil {
				f.Unanswered = "the node did not answer a dry run: " + err.Error()
			} else {
				reboot := res.Reboot()
				f.Reboot = &reboot
			}
			out[j.i] = withName(domain.DecideMachineImpact(f), out[j.i])
		}()
	}
	wg.Wait()
	// Machines the change adds: <group>-<index> up to the new count (tofu
	// groups; a metal group's selector picks machines already listed).
	for _, name := range slicesSortedKeys(next) {
		ng := next[name]
		if ng.Metadata.DeletionTimestamp != nil || s.metalGroup(ng) {
			continue
		}
		// Only what the change adds: a group's machines not built yet
		// before it are not its doing.
		var before []string
		if cur := now[name]; cur != nil && cur.Metadata.DeletionTimestamp == nil {
			before = missingMachines(cur, byGroup[name])
		}
		for _, mn := range missingMachines(ng, byGroup[name]) {
			if !slices.Contains(before, mn) {
				out = append(out, withName(domain.DecideMachineImpact(domain.ImpactFacts{Wanted: true}),
					domain.MachineImpact{Machine: mn, NodeGroup: name}))
			}
		}
	}
	slices.SortFunc(out, func(a, b domain.MachineImpact) int { return strings.Compare(a.Machine, b.Machine) })
	return domain.ChangeImpact{Summary: domain.ImpactSummary(out), Machines: out}, ctx.Err()
}

// missingMachines are the machines a node group wants that do not exist
// yet: of its members (the indexes spec.members lists, or 0..count-1) those
// not built.
func missingMachines(ng *domain.NodeGroup, have []string) []string {
	var out []string
	for _, mn := range ng.Spec.MachineNames(ng.Metadata.Name) {
		if !slices.Contains(have, mn) {
			out = append(out, mn)
		}
	}
	return out
}

// metalGroup reports whether a node group's Provider is of type metal.
func (s *Service) metalGroup(ng *domain.NodeGroup) bool {
	p, ok, err := projections.Get[domain.Provider](s.cache, domain.ObjectRef(domain.ProviderKind, "", ng.Spec.Provider))
	return err == nil && ok && p.Spec.Type == domain.ProviderMetal
}

func withName(d, named domain.MachineImpact) domain.MachineImpact {
	d.Machine, d.NodeGroup = named.Machine, named.NodeGroup
	return d
}

func slicesSortedKeys(m map[string]*domain.NodeGroup) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// installSection is a config's machine.install, encoded ("" when the config
// does not load or has none).
func installSection(cfg []byte) string {
	p, err := configloader.NewFromBytes(cfg)
	if err != nil || p.RawV1Alpha1() == nil || p.RawV1Alpha1().MachineConfig == nil {
		return ""
	}
	b, err := json.Marshal(p.RawV1Alpha1().MachineConfig.MachineInstall)
	if err != nil {
		return ""
	}
	return string(b)
}
