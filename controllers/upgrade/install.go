package upgrade

import (
	"context"
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// SchematicRegistrar makes the Image Factory know a schematic before a
// machine installs from it (a *factory.Client).
type SchematicRegistrar interface {
	Register(ctx context.Context, s *domain.Schematic) error
}

// groupInstall reads what a machine's node group installs: the group and
// its tenant's specs (nil when gone).
func (r *upgradeRun) groupInstall(m *domain.Machine) (*domain.TenantSpec, *domain.NodeGroupSpec) {
	var ts *domain.TenantSpec
	if t, ok, err := projections.Get[domain.Tenant](r.s.cfg.Cache, domain.TenantRef(r.ref.Tenant)); err == nil && ok {
		ts = &t.Spec
	}
	ref := domain.ObjectRef(domain.NodeGroupKind, r.ref.Tenant, m.Spec.NodeGroup)
	if ng, ok, err := projections.Get[domain.NodeGroup](r.s.cfg.Cache, ref); err == nil && ok {
		return ts, &ng.Spec
	}
	return ts, nil
}

// installer is the image a machine is upgraded to version with: its node
// group's explicit installImage at that version, else the Image Factory's
// installer of the group's schematic (domain.InstallerOf).
func (r *upgradeRun) installer(m *domain.Machine, version string) domain.Installer {
	ts, ng := r.groupInstall(m)
	return domain.InstallerOf(r.s.cfg.ImageFactory, ts, ng, version)
}

// rollbackInstaller is the image that brings a machine back to the version
// and schematic it ran before its step.
func (r *upgradeRun) rollbackInstaller(m *domain.Machine, e domain.UpgradeMachine) string {
	if e.FromSchematic == "" {
		return r.installer(m, e.From).Image
	}
	ts, ng := r.groupInstall(m)
	sb := false
	if s := domain.EffectiveSchematic(ts, ng); s != nil {
		sb = s.SecureBoot
	}
	return domain.FactoryInstallerOf(r.s.cfg.ImageFactory, e.FromSchematic, sb, e.From)
}

// register makes the factory know the schematic of the machine's group
// before the machine is asked to install it.
func (r *upgradeRun) register(ctx context.Context, m *domain.Machine) error {
	if r.s.cfg.Schematics == nil {
		return nil
	}
	ts, ng := r.groupInstall(m)
	if inst := domain.InstallerOf(r.s.cfg.ImageFactory, ts, ng, ""); inst.Schematic == "" || inst.Schematic == domain.VanillaSchematic {
		return nil
	}
	if err := r.s.cfg.Schematics.Register(ctx, domain.EffectiveSchematic(ts, ng)); err != nil {
		return fmt.Errorf("registering the schematic of node group %s with the image factory: %w", m.Spec.NodeGroup, err)
	}
	return nil
}

// build is what a step compares with its target: the version the node runs
// and, when the step installs a schematic, the schematic it runs
// ("v1.13.0+<id>"), so a node back on the same version with another image
// is not taken for one that took the step.
func (r *upgradeRun) build(ctx context.Context, m *domain.Machine, e domain.UpgradeMachine) (string, error) {
	if e.ToSchematic == "" {
		return r.nodes.version(ctx, m)
	}
	v, sch, err := r.nodes.versionAndSchematic(ctx, m)
	if err != nil {
		return "", err
	}
	return buildOf(v, sch, e.ToSchematic), nil
}

// buildOf joins a version and the schematic a node reports ("": none, the
// vanilla one) when want names one.
func buildOf(version, schematic, want string) string {
	if want == "" {
		return version
	}
	if schematic == "" {
		schematic = domain.VanillaSchematic
	}
	return version + "+" + schematic
}

// stepTarget and stepOrigin are the builds a step goes to and comes from.
func stepTarget(e domain.UpgradeMachine) string { return buildOf(e.To, e.ToSchematic, e.ToSchematic) }
func stepOrigin(e domain.UpgradeMachine) string {
	return buildOf(e.From, e.FromSchematic, e.ToSchematic)
}
