package apply

import (
	"context"
	"fmt"
	"slices"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/providers"
)

// registerSchematics makes the Image Factory know the schematic of every
// node group that installs from it, before tofu builds machines whose
// configs name its installers: a factory serves installers only of the
// schematics it was given, so a machine built first would fail to install.
// The vanilla schematic is well known to every factory.
func (w *Worker) registerSchematics(ctx context.Context, in providers.GenerateInput, metal []*domain.NodeGroup) error {
	if w.cfg.Schematics == nil || in.Tenant == nil {
		return nil
	}
	groups := slices.Clone(metal)
	for _, g := range in.Groups {
		groups = append(groups, g.NodeGroup)
	}
	seen := map[string]bool{}
	for _, ng := range groups {
		if s, err := domain.ReadInstallSettings(ng.Spec.ProviderConfig); err == nil && s.InstallImage != "" {
			continue
		}
		sch := domain.EffectiveSchematic(&in.Tenant.Spec, &ng.Spec)
		if sch.Vanilla() || seen[sch.ID()] {
			continue
		}
		seen[sch.ID()] = true
		if err := w.cfg.Schematics.Register(ctx, sch); err != nil {
			return fmt.Errorf("registering the schematic of node group %s with the image factory: %w", ng.Metadata.Name, err)
		}
	}
	return nil
}
