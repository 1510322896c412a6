package upgrade

import (
	"context"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// A change of a node group's schematic (its own, or its tenant's when it
// declares none) re-images its machines in place: a Talos run to the version
// they run, whose steps install the group's new installer (withSchematics),
// drained, one control plane at a time, control planes first, as any
// upgrade. The versions bucket remembers each group's schematic beside its
// version for this.

// declaredBuild is what the versions bucket remembers of a node group: its
// Talos version and, when it installs a factory schematic other than the
// vanilla one, the schematic's ID ("v1.13.0 <id>"). A group without one is
// remembered by its version alone, as before schematics existed.
func declaredBuild(tenant *domain.TenantSpec, ng *domain.NodeGroupSpec, version string) string {
	return declaredBuildOf(tenant, ng, version, nil)
}

// schematicIDs remembers the IDs of the schematics one trigger call met:
// the groups that follow their tenant's share its schematic, hashed once.
type schematicIDs map[*domain.Schematic]string

// declaredBuildOf is declaredBuild with the IDs remembered in ids (nil:
// none).
func declaredBuildOf(tenant *domain.TenantSpec, ng *domain.NodeGroupSpec, version string, ids schematicIDs) string {
	if ownsSchematic(ng) && ng.Schematic == nil {
		return version // its own installImage
	}
	s := domain.EffectiveSchematic(tenant, ng)
	if s.Vanilla() {
		return version
	}
	id, ok := ids[s]
	if !ok {
		id = s.ID()
		if ids != nil {
			ids[s] = id
		}
	}
	return version + " " + id
}

// rememberedVersion is the version part of a remembered build.
func rememberedVersion(build string) string {
	v, _, _ := strings.Cut(build, " ")
	return v
}

// ownsSchematic reports whether a group's installer does not follow its
// tenant's schematic (it declares its own, or names its installImage).
func ownsSchematic(ng *domain.NodeGroupSpec) bool {
	if ng.Schematic != nil {
		return true
	}
	s, err := domain.ReadInstallSettings(ng.ProviderConfig)
	return err == nil && s.InstallImage != ""
}

// startReimages starts one re-image run per version for the groups whose
// schematic changed, and remembers their new builds once it exists (a crash
// in between delivers the event again and finds the run by its name).
// Groups without machines yet are built with the new installer: no run.
func (s *Saga) startReimages(ctx context.Context, kv jetstream.KeyValue, ev *domain.Event, seq uint64, tenant *domain.Tenant,
	reimage map[string][]domain.NodeGroup, total int, machines []domain.Machine) error {
	versions := make([]string, 0, len(reimage))
	for v := range reimage {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	for _, v := range versions {
		if hasMachines(reimage[v], machines) {
			spec := talosRunSpec(v, reimage[v], total)
			spec.Reimage = true
			if err := s.startRun(ctx, ev, seq, tenant.Metadata.Name, spec); err != nil {
				return err
			}
		}
		for _, ng := range reimage[v] {
			if _, err := kv.Put(ctx, tenant.Metadata.Name+"."+ng.Metadata.Name, []byte(declaredBuild(&tenant.Spec, &ng.Spec, v))); err != nil {
				return err
			}
		}
	}
	return nil
}
