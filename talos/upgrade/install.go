package upgrade

import (
	"encoding/json"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// InstallerImage is the installer of a Talos version that upgrades use for
// a node group whose providerConfig names no installImage.
func InstallerImage(version string) string { return "ghcr.io/siderolabs/installer:" + version }

// InstallImageFor is a node group's installImage (providerConfig.installImage:
// a custom installer, with its system extensions) at another Talos version:
// its tag replaced by version (the tag is what follows the last ':' after the
// last '/'; a registry port is not one), any digest dropped, since a digest
// pins the old version's image.
func InstallImageFor(image, version string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	if colon := strings.LastIndex(image, ":"); colon > slash {
		image = image[:colon]
	}
	return image + ":" + version
}

// installer is the image a machine is upgraded (or rolled back) to version
// with: its node group's providerConfig.installImage at that version, else
// Config.Installer's.
func (r *upgradeRun) installer(m *domain.Machine, version string) string {
	ref := domain.ObjectRef(domain.NodeGroupKind, r.ref.Tenant, m.Spec.NodeGroup)
	if ng, ok, err := projections.Get[domain.NodeGroup](r.s.cfg.Cache, ref); err == nil && ok && len(ng.Spec.ProviderConfig) > 0 {
		var pc struct {
			InstallImage string `json:"installImage"`
		}
		if json.Unmarshal(ng.Spec.ProviderConfig, &pc) == nil && pc.InstallImage != "" {
			return InstallImageFor(pc.InstallImage, version)
		}
	}
	return r.s.cfg.Installer(version)
}
