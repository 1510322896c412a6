package upgrade

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Schematic drift. The drift check finds a machine whose image runs another
// Image Factory schematic than its node group declares (re-imaged behind
// RezusCloud's back, or a re-image that never happened). With the tenant's
// drift action "correct", it asks the saga for a re-image run of that
// group (CorrectSchematicDrift): an ordinary run, drained, one machine at a
// time, maintenance windows respected, whose steps leave alone the machines
// that already run the declared schematic (withSchematics).

// TriggerDrift is the LabelTrigger of a run that corrects schematic drift.
const TriggerDrift = "drift"

// AnnotationCorrects names what a drift run corrects: "<nodegroup> <build>",
// the group and its declared build (declaredBuild) at the time.
const AnnotationCorrects = "rezuscloud.io/corrects"

// driftRunPrefix is the name prefix of a group's drift runs at version.
func driftRunPrefix(version string) string {
	return strings.TrimSuffix(upgradeName("reimage-", version, 0), "-0") + "-drift-"
}

// driftDecision is whether a schematic drift starts a run, and why not.
type driftDecision struct {
	// Name is the run to create; empty: none.
	Name string
	// Why says why no run starts.
	Why string
}

// decideDriftReimage decides whether the schematic drift of a node group
// declared at build (declaredBuild at version) starts a re-image run, given
// the tenant's runs. None starts while any run of the tenant is unfinished
// (it may be the one re-imaging; the next check decides again), nor when
// the tenant's latest run is a correction of the same drift that failed or
// was canceled: a correction is not retried in a loop, nor against a
// user's cancel, until the declaration changes or another run follows.
// The name counts up from the group's earlier drift runs at that version.
func decideDriftReimage(runs []domain.Upgrade, group, version, build string) driftDecision {
	var latest *domain.Upgrade
	names := map[string]bool{}
	for i := range runs {
		u := &runs[i]
		names[u.Metadata.Name] = true
		if !u.Status.Final() {
			return driftDecision{Why: "upgrade " + u.Metadata.Name + " is not finished"}
		}
		if latest == nil || newer(u, latest) {
			latest = u
		}
	}
	if latest != nil && latest.Metadata.Labels[LabelTrigger] == TriggerDrift &&
		latest.Metadata.Annotations[AnnotationCorrects] == group+" "+build && latest.Status.Phase != domain.UpgradeSucceeded {
		return driftDecision{Why: fmt.Sprintf("the last correction, %s, ended %s (%s); it is not retried until the declaration changes or another upgrade runs",
			latest.Metadata.Name, latest.Status.Phase, latest.Status.Reason)}
	}
	prefix := driftRunPrefix(version)
	for n := 1; ; n++ {
		if name := prefix + strconv.Itoa(n); !names[name] {
			return driftDecision{Name: name}
		}
	}
}

// newer reports whether a was created after b (by name on a tie).
func newer(a, b *domain.Upgrade) bool {
	at, bt := a.Metadata.CreationTimestamp, b.Metadata.CreationTimestamp
	switch {
	case at == nil || bt == nil:
		return bt == nil && at != nil
	case !at.Equal(*bt):
		return at.After(*bt)
	}
	return a.Metadata.Name > b.Metadata.Name
}

// CorrectSchematicDrift starts a re-image run of a tenant's node group whose
// machines (named for the cause) run another schematic than it declares,
// unless decideDriftReimage says no. It waits until the read model holds the
// run, so a second drifted machine of the same check finds it.
func (s *Saga) CorrectSchematicDrift(ctx context.Context, tenant, group string, machines []string) error {
	t, ok, err := projections.Get[domain.Tenant](s.cfg.Cache, domain.TenantRef(tenant))
	if err != nil || !ok {
		return err
	}
	ng, ok, err := projections.Get[domain.NodeGroup](s.cfg.Cache, domain.ObjectRef(domain.NodeGroupKind, tenant, group))
	if err != nil || !ok {
		return err
	}
	if t.Metadata.DeletionTimestamp != nil || ng.Metadata.DeletionTimestamp != nil {
		return nil
	}
	version := ng.Spec.TalosVersion
	if version == "" {
		version = t.Spec.TalosVersion
	}
	runs, err := projections.List[domain.Upgrade](s.cfg.Cache, domain.UpgradeKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return err
	}
	build := declaredBuild(&t.Spec, &ng.Spec, version)
	d := decideDriftReimage(runs, group, version, build)
	if d.Name == "" {
		s.cfg.Log.Debug("schematic drift: no re-image now", "tenant", tenant, "nodeGroup", group, "why", d.Why)
		return nil
	}
	spec := talosRunSpec(version, []domain.NodeGroup{*ng}, 0)
	spec.Reimage = true
	machines = append([]string(nil), machines...)
	sort.Strings(machines)
	obj := &domain.Object{
		Metadata: domain.ObjectMeta{Name: d.Name, Tenant: tenant,
			Labels: map[string]string{LabelTrigger: TriggerDrift},
			Annotations: map[string]string{AnnotationCorrects: group + " " + build,
				AnnotationCause: "schematic drift of " + strings.Join(machines, ", ")}},
		Spec: upgradeJSON(spec),
	}
	res, err := s.createRun(ctx, obj, "", "upgrade-drift-"+tenant+"-"+d.Name)
	if err != nil {
		return fmt.Errorf("starting a re-image of node group %s of tenant %s: %w", group, tenant, err)
	}
	if res == nil {
		return nil
	}
	s.cfg.Log.Info("upgrade queued by schematic drift", "tenant", tenant, "upgrade", d.Name, "nodeGroup", group, "machines", machines)
	return s.cfg.Cache.WaitFor(ctx, res.Seq)
}
